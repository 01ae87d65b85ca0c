#!/usr/bin/env python3
"""The official `openai` Python client against a running `kiln serve`.

    openai_client_test.py http://127.0.0.1:8000 [--api-key KEY] [--model NAME]

Covers completions and chat, whole and streamed (OpenAI's SSE framing as the client parses it),
n > 1, batched prompts, logprobs in both shapes, sampling extensions (extra_body), determinism of
greedy and seeded sampling, stop strings, ignore_eos, errors (400 naming the field, 404, context
length) and, with --api-key, authentication. Exits non-zero when any check fails.
"""

import argparse
import sys
import unittest
import urllib.request

import openai

ARGS = None


def client(api_key=None, **kw):
    key = api_key if api_key is not None else (ARGS.api_key or "none")
    return openai.OpenAI(base_url=ARGS.base_url.rstrip("/") + "/v1", api_key=key, max_retries=0, timeout=300, **kw)


class OpenAIClientTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.c = client()
        models = cls.c.models.list()
        cls.model = ARGS.model or models.data[0].id

    # ---- side endpoints ----

    def test_models(self):
        ids = [m.id for m in self.c.models.list().data]
        self.assertIn(self.model, ids)
        self.assertEqual(self.c.models.retrieve(self.model).id, self.model)

    def test_health_and_version(self):
        with urllib.request.urlopen(ARGS.base_url.rstrip("/") + "/health") as r:
            self.assertEqual(r.status, 200)
        with urllib.request.urlopen(ARGS.base_url.rstrip("/") + "/metrics") as r:
            text = r.read().decode()
        self.assertIn("kiln:num_requests_running", text)
        self.assertIn("kiln:time_to_first_token_seconds_bucket", text)

    # ---- completions ----

    def test_completion(self):
        r = self.c.completions.create(model=self.model, prompt="Once upon a time", max_tokens=8, temperature=0)
        self.assertEqual(r.object, "text_completion")
        self.assertTrue(r.id.startswith("cmpl-"))
        self.assertEqual(len(r.choices), 1)
        self.assertIsInstance(r.choices[0].text, str)
        self.assertIn(r.choices[0].finish_reason, ("stop", "length"))
        self.assertGreater(r.usage.prompt_tokens, 0)
        self.assertLessEqual(r.usage.completion_tokens, 8)
        self.assertEqual(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens)

    def test_completion_ignore_eos_runs_to_max_tokens(self):
        r = self.c.completions.create(model=self.model, prompt="Hello", max_tokens=12, temperature=0,
                                      extra_body={"ignore_eos": True})
        self.assertEqual(r.usage.completion_tokens, 12)
        self.assertEqual(r.choices[0].finish_reason, "length")

    def test_completion_logprobs(self):
        r = self.c.completions.create(model=self.model, prompt="The sky is", max_tokens=6, temperature=0,
                                      logprobs=3, extra_body={"ignore_eos": True})
        lp = r.choices[0].logprobs
        n = r.usage.completion_tokens
        self.assertEqual(len(lp.tokens), n)
        self.assertEqual(len(lp.token_logprobs), n)
        self.assertEqual(len(lp.text_offset), n)
        self.assertEqual(len(lp.top_logprobs), n)
        for tok, chosen, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
            self.assertLessEqual(chosen, 0.0)
            self.assertLessEqual(len(top), 4)  # the top 3 plus the chosen token
            self.assertIn(tok, top)
            # Greedy: the chosen token is the most likely one.
            self.assertAlmostEqual(max(top.values()), chosen, places=4)
        self.assertEqual(lp.text_offset, sorted(lp.text_offset))

    def test_completion_n_and_batches(self):
        r = self.c.completions.create(model=self.model, prompt="Hi", max_tokens=4, n=3, temperature=1.0, seed=1)
        self.assertEqual(sorted(c.index for c in r.choices), [0, 1, 2])
        r = self.c.completions.create(model=self.model, prompt=["first", "second"], max_tokens=4, temperature=0)
        self.assertEqual(sorted(c.index for c in r.choices), [0, 1])
        r = self.c.completions.create(model=self.model, prompt=[1, 2, 3], max_tokens=2, temperature=0)
        self.assertEqual(r.usage.prompt_tokens, 3)

    def test_completion_stream(self):
        chunks = list(self.c.completions.create(model=self.model, prompt="Once", max_tokens=8, temperature=0,
                                                stream=True, stream_options={"include_usage": True},
                                                extra_body={"ignore_eos": True}))
        self.assertGreater(len(chunks), 1)
        self.assertEqual(len({c.id for c in chunks}), 1)
        self.assertEqual(len({c.created for c in chunks}), 1)
        self.assertEqual(chunks[-1].choices, [])
        self.assertEqual(chunks[-1].usage.completion_tokens, 8)
        self.assertEqual(chunks[-2].choices[0].finish_reason, "length")
        text = "".join(c.choices[0].text for c in chunks[:-1])
        whole = self.c.completions.create(model=self.model, prompt="Once", max_tokens=8, temperature=0,
                                          extra_body={"ignore_eos": True})
        self.assertEqual(text, whole.choices[0].text)

    def test_determinism(self):
        a = self.c.completions.create(model=self.model, prompt="A", max_tokens=10, temperature=0)
        b = self.c.completions.create(model=self.model, prompt="A", max_tokens=10, temperature=0)
        self.assertEqual(a.choices[0].text, b.choices[0].text)
        a = self.c.completions.create(model=self.model, prompt="A", max_tokens=10, temperature=1.0, seed=1234)
        b = self.c.completions.create(model=self.model, prompt="A", max_tokens=10, temperature=1.0, seed=1234)
        self.assertEqual(a.choices[0].text, b.choices[0].text)

    def test_stop_strings(self):
        base = self.c.completions.create(model=self.model, prompt="Count:", max_tokens=16, temperature=0,
                                         extra_body={"ignore_eos": True}).choices[0].text
        if len(base) < 4:
            self.skipTest("the model produced too little text to pick a stop string")
        stop = base[2:4]
        r = self.c.completions.create(model=self.model, prompt="Count:", max_tokens=16, temperature=0, stop=[stop],
                                      extra_body={"ignore_eos": True})
        self.assertEqual(r.choices[0].finish_reason, "stop")
        self.assertEqual(r.choices[0].text, base[:base.index(stop)])

    # ---- chat ----

    def test_chat(self):
        r = self.c.chat.completions.create(model=self.model, messages=[{"role": "user", "content": "Say hi"}],
                                           max_tokens=8, temperature=0)
        self.assertEqual(r.object, "chat.completion")
        self.assertTrue(r.id.startswith("chatcmpl-"))
        self.assertEqual(r.choices[0].message.role, "assistant")
        self.assertIsInstance(r.choices[0].message.content, str)
        self.assertIn(r.choices[0].finish_reason, ("stop", "length"))
        self.assertLessEqual(r.usage.completion_tokens, 8)

    def test_chat_sampling_extensions(self):
        r = self.c.chat.completions.create(
            model=self.model, messages=[{"role": "system", "content": "Be brief."},
                                        {"role": "user", "content": "Hello"}],
            max_completion_tokens=6, temperature=0.8, top_p=0.9, presence_penalty=0.5, frequency_penalty=0.5,
            seed=3, n=2, extra_body={"top_k": 20, "min_p": 0.05, "repetition_penalty": 1.1, "min_tokens": 2,
                                     "ignore_eos": True, "chat_template_kwargs": {"thinking": False}})
        self.assertEqual(len(r.choices), 2)
        for c in r.choices:
            self.assertEqual(c.finish_reason, "length")
        self.assertEqual(r.usage.completion_tokens, 12)

    def test_chat_logprobs(self):
        r = self.c.chat.completions.create(model=self.model, messages=[{"role": "user", "content": "Hi"}],
                                           max_tokens=5, temperature=0, logprobs=True, top_logprobs=3,
                                           extra_body={"ignore_eos": True})
        content = r.choices[0].logprobs.content
        self.assertEqual(len(content), r.usage.completion_tokens)
        for entry in content:
            self.assertLessEqual(entry.logprob, 0.0)
            self.assertIsInstance(entry.bytes, list)
            self.assertEqual(len(entry.top_logprobs), 3)
            self.assertAlmostEqual(entry.top_logprobs[0].logprob, entry.logprob, places=4)

    def test_chat_stream(self):
        stream = self.c.chat.completions.create(model=self.model, messages=[{"role": "user", "content": "Hi"}],
                                                max_tokens=8, temperature=0, stream=True,
                                                stream_options={"include_usage": True},
                                                extra_body={"ignore_eos": True})
        chunks = list(stream)
        self.assertEqual(chunks[0].choices[0].delta.role, "assistant")
        self.assertEqual(chunks[0].choices[0].delta.content, "")
        self.assertEqual(len({c.id for c in chunks}), 1)
        self.assertEqual(chunks[-1].choices, [])
        self.assertEqual(chunks[-1].usage.completion_tokens, 8)
        self.assertEqual(chunks[-2].choices[0].finish_reason, "length")
        for c in chunks[:-1]:
            self.assertIsNone(c.usage)
        text = "".join(c.choices[0].delta.content or "" for c in chunks[:-1])
        whole = self.c.chat.completions.create(model=self.model, messages=[{"role": "user", "content": "Hi"}],
                                               max_tokens=8, temperature=0, extra_body={"ignore_eos": True})
        self.assertEqual(text, whole.choices[0].message.content)

    def test_chat_stream_without_usage_and_early_close(self):
        chunks = list(self.c.chat.completions.create(model=self.model, messages=[{"role": "user", "content": "Hi"}],
                                                     max_tokens=4, stream=True))
        self.assertTrue(all(c.choices for c in chunks))  # no usage chunk unless asked
        self.assertTrue(all(c.usage is None for c in chunks))
        # A client that stops reading early disconnects; the server carries on.
        with self.c.chat.completions.create(model=self.model, messages=[{"role": "user", "content": "Hi"}],
                                            max_tokens=512, stream=True, extra_body={"ignore_eos": True}) as s:
            for _ in s:
                break
        self.c.models.list()

    # ---- errors ----

    def check_bad_request(self, param, **kw):
        with self.assertRaises(openai.BadRequestError) as cm:
            self.c.chat.completions.create(model=self.model, messages=[{"role": "user", "content": "Hi"}], **kw)
        self.assertEqual(cm.exception.status_code, 400)
        self.assertEqual(cm.exception.body.get("param"), param)
        self.assertIn(param, cm.exception.message)

    def test_errors(self):
        self.check_bad_request("temperature", temperature=5)
        self.check_bad_request("top_p", top_p=0)
        self.check_bad_request("n", n=0)
        self.check_bad_request("top_logprobs", top_logprobs=3)
        self.check_bad_request("stop", stop=[""])
        self.check_bad_request("top_k", extra_body={"top_k": -5})
        with self.assertRaises(openai.NotFoundError):
            self.c.completions.create(model="no-such-model", prompt="x", max_tokens=1)
        with self.assertRaises(openai.BadRequestError) as cm:
            self.c.completions.create(model=self.model, prompt="word " * 300_000, max_tokens=1)
        self.assertEqual(cm.exception.body.get("code"), "context_length_exceeded")
        with self.assertRaises(openai.APIStatusError) as cm:  # over the body limit
            self.c.completions.create(model=self.model, prompt=[1] * 10_000_000, max_tokens=1)
        self.assertEqual(cm.exception.status_code, 413)

    def test_api_key(self):
        if not ARGS.api_key:
            self.skipTest("the server runs without --api-key")
        with self.assertRaises(openai.AuthenticationError) as cm:
            client(api_key="wrong-" + ARGS.api_key).models.list()
        self.assertEqual(cm.exception.status_code, 401)
        self.assertEqual(cm.exception.body.get("code"), "invalid_api_key")
        self.assertTrue(client().models.list().data)


def main():
    global ARGS
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("base_url", help="the server, e.g. http://127.0.0.1:8000")
    p.add_argument("--api-key", default="", help="the key the server was started with (--api-key)")
    p.add_argument("--model", default="", help="model name (default: the first of /v1/models)")
    ARGS, rest = p.parse_known_args()
    prog = unittest.main(argv=[sys.argv[0]] + rest, exit=False, verbosity=2)
    sys.exit(0 if prog.result.wasSuccessful() else 1)


if __name__ == "__main__":
    main()
