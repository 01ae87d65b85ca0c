// The dense layers' host side: model/layers/dense_ops (sampler settings and penalty packing from a
// ForwardBatch, the embedding feed map, results) and model/layers/linear's plans and tuning; then overlap
// scheduling end to end on the host target: step N samples on the device, step N+1's embedding reads the
// sampled token through the feed map without the host seeing it.
#include <doctest/doctest.h>

#include <cstring>

#include "autotune/heuristics/linear.hpp"
#include "jit/families/embedding.hpp"
#include "jit/families/sample.hpp"
#include "model/layers/dense_ops.hpp"
#include "model/layers/linear.hpp"
#include "runtime/error.hpp"
#include "tests/common/backends.hpp"
#include "tests/common/tensors.hpp"

using namespace kiln;
using model::forward::ForwardBatch;
using model::forward::SequenceStep;

namespace {

SequenceStep step(std::vector<int32_t> tokens, bool sample) {
    SequenceStep s;
    s.tokens = std::move(tokens);
    s.sample = sample;
    return s;
}

}  // namespace

TEST_CASE("sampler settings, penalty lists and rows from a batch") {
    ForwardBatch b;
    b.seqs.push_back(step({1, 2, 3}, false));  // a prefill chunk that does not sample
    b.seqs.push_back(step({-1}, true));       // a fed decode
    b.seqs.push_back(step({7}, true));
    b.seqs[1].feed_from = 2;
    b.seqs[1].output = {10, 11};
    b.seqs[1].prompt = {5, 6, 7};
    b.seqs[1].sampling.temperature = 0.7f;
    b.seqs[1].sampling.repetition_penalty = 1.2f;
    b.seqs[1].sampling.seeded = true;
    b.seqs[1].sampling.seed = 42;
    b.seqs[1].sampling.want_logprobs = true;
    b.seqs[2].output = {4};
    b.seqs[2].prompt = {9};
    b.seqs[2].sampling.frequency_penalty = 0.5f;

    CHECK(model::layers::sample_rows(b) == std::vector<int32_t>{-1, 0, 1});
    const std::vector<int32_t> prev_rows = {0, -1, 1};  // the previous batch: sequence 2 sampled row 1
    const auto in = model::layers::build_sample_inputs(b, prev_rows, 99);
    REQUIRE(in.seqs.size() == 2);
    CHECK(in.batch_index == std::vector<int32_t>{1, 2});
    const kiln_params::SampleSeq& a = in.seqs[0];
    CHECK(a.seed == 42);
    CHECK(a.step == 3);  // two generated tokens and the fed one
    CHECK(a.feed_src == 1);
    CHECK(a.flags == 1);
    CHECK(std::vector<int32_t>(in.penalty_tokens.begin() + a.gen_begin,
                               in.penalty_tokens.begin() + a.gen_begin + a.gen_count) == std::vector<int32_t>{10, 11});
    CHECK(std::vector<int32_t>(in.penalty_tokens.begin() + a.prompt_begin,
                               in.penalty_tokens.begin() + a.prompt_begin + a.prompt_count) == std::vector<int32_t>{5, 6, 7});
    const kiln_params::SampleSeq& c = in.seqs[1];
    CHECK(c.seed == 99);  // not seeded
    CHECK(c.step == 1);
    CHECK(c.feed_src == -1);
    CHECK(c.gen_count == 1);
    CHECK(c.prompt_count == 0);  // no repetition penalty: the prompt is not needed

    CHECK(model::layers::build_feed_map(b, prev_rows) == std::vector<int32_t>{3, 1});
    b.seqs[1].feed_from = 1;  // sequence 1 of the previous batch did not sample
    CHECK_THROWS_AS(model::layers::build_feed_map(b, prev_rows), InvalidArgument);
}

TEST_CASE("sampling settings out of range are refused, naming the field") {
    ForwardBatch b;
    b.seqs.push_back(step({1}, true));
    auto refused = [&](auto set, const char* field) {
        ForwardBatch c = b;
        set(c.seqs[0].sampling);
        try {
            model::layers::build_sample_inputs(c, {}, 0);
            FAIL("accepted a bad ", field);
        } catch (const InvalidArgument& e) {
            CHECK(std::string(e.what()).find(field) != std::string::npos);
        }
    };
    refused([](auto& s) { s.temperature = -1.0f; }, "temperature");
    refused([](auto& s) { s.top_p = 0.0f; }, "top_p");
    refused([](auto& s) { s.min_p = 1.5f; }, "min_p");
    refused([](auto& s) { s.top_k = -3; }, "top_k");
    refused([](auto& s) { s.repetition_penalty = 0.0f; }, "repetition_penalty");
    refused([](auto& s) { s.logprobs = 21; }, "logprobs");
}

TEST_CASE("step results from the sampler's outputs") {
    ForwardBatch b;
    b.seqs.push_back(step({1}, true));
    b.seqs.push_back(step({2}, false));
    b.seqs.push_back(step({3}, true));
    b.seqs[0].sampling.want_logprobs = true;
    b.seqs[0].sampling.logprobs = 2;
    const auto in = model::layers::build_sample_inputs(b, {}, 0);
    std::vector<kiln_params::SampleOut> out(2);
    std::memset(out.data(), 0, out.size() * sizeof(out[0]));
    out[0].token = 17;
    out[0].logprob = -0.5f;
    out[0].top_count = 2;
    out[0].top[0] = {17, -0.5f};
    out[0].top[1] = {3, -1.5f};
    out[1].token = -1;
    out[1].nonfinite = 1;
    const auto r = model::layers::step_result(b, in, out);
    REQUIRE(r.seqs.size() == 3);
    CHECK(r.seqs[0].token == 17);
    CHECK(r.seqs[0].chosen.logprob == -0.5f);
    REQUIRE(r.seqs[0].top.size() == 2);
    CHECK(r.seqs[0].top[1].token == 3);
    CHECK(r.seqs[1].token == -1);  // did not sample
    CHECK_FALSE(r.seqs[1].nonfinite);
    CHECK(r.seqs[2].nonfinite);
    CHECK(r.seqs[2].token == -1);
}

TEST_CASE("linear tuning fields and family tiles") {
    autotune::LinearTuning t = autotune::default_linear_tuning();
    autotune::set_tuning_field(t, "small_m_max", "8");
    autotune::set_tuning_field(t, "cublaslt", "false");
    CHECK(t.small_m_max == 8);
    CHECK_FALSE(t.cublaslt);
    CHECK(autotune::linear_tile(t, 8).block_m == 16);
    CHECK(autotune::linear_tile(t, 9).block_m == 64);
    CHECK(autotune::linear_tile(t, 65).block_m == 128);
    CHECK_THROWS_AS(autotune::set_tuning_field(t, "medium_m_max", "4"), InvalidArgument);
    CHECK_THROWS_AS(autotune::set_tuning_field(t, "block", "4"), InvalidArgument);
    CHECK(autotune::describe(autotune::default_linear_tuning()) ==
          "cublaslt=true,cublaslt_min_m=1,small_m_max=16,medium_m_max=64");
}

TEST_CASE("overlap scheduling on the host target: a sampled token fed to the next step's embedding") {
    test::TestBackend* hb = test::host_backend();
    if (hb == nullptr) return;  // kiln built without the host JIT
    runtime::Backend& be = *hb->backend;
    runtime::Stream& s = *hb->stream;
    const int V = 64, dim = 16;
    CHECK(model::layers::make_cublaslt(be) == nullptr);  // not a CUDA backend
    const model::layers::Linear lin(*hb->disp, be, {32, 16, jit::LinearOut::f32}, autotune::default_linear_tuning());
    CHECK(lin.plan(5).path == model::layers::LinearPath::family);

    // Step N: one greedy sequence whose logits peak at token 37.
    ForwardBatch n;
    n.seqs.push_back(step({5}, true));
    std::vector<float> logits(V, 0.0f);
    logits[37] = 3.0f;
    const auto in = model::layers::build_sample_inputs(n, {}, 0);
    runtime::Buffer lg = test::upload(be, logits), sq = test::upload(be, in.seqs), pt = test::upload(be, in.penalty_tokens);
    runtime::Buffer out = be.alloc(sizeof(kiln_params::SampleOut)), tok = be.alloc(4);
    const jit::LoadedKernel& ks = hb->disp->get(jit::SampleFamily::descriptor(jit::Target::host_target()));
    jit::SampleArgs sa;
    sa.logits = lg.view(runtime::DType::f32, {1, V});
    sa.vocab = V;
    sa.seqs = sq.view(runtime::DType::u8, {1, int64_t(sizeof(kiln_params::SampleSeq))});
    sa.penalty_tokens = pt.view(runtime::DType::i32, {int64_t(in.penalty_tokens.size())});
    sa.out = out.view(runtime::DType::u8, {1, int64_t(sizeof(kiln_params::SampleOut))});
    sa.tokens_out = tok.view(runtime::DType::i32, {1});
    jit::launch_sample(ks, s, sa);

    // Step N+1, planned before N's result is known: sequence 1 is fed from step N's sequence 0.
    ForwardBatch n1;
    n1.seqs.push_back(step({8, 9}, false));
    n1.seqs.push_back(step({-1}, true));
    n1.seqs[1].feed_from = 0;
    const auto feed = model::layers::build_feed_map(n1, model::layers::sample_rows(n));
    CHECK(feed == std::vector<int32_t>{2, 0});
    const std::vector<int32_t> ids = {8, 9, -1};
    const std::vector<uint16_t> table = test::random_bf16(size_t(V) * dim, 7);
    runtime::Buffer idb = test::upload(be, ids), fb = test::upload(be, feed), tb = test::upload(be, table);
    runtime::Buffer emb = be.alloc(size_t(3) * dim * 2), used = be.alloc(12);
    jit::EmbeddingArgs ea;
    ea.ids = idb.view(runtime::DType::i32, {3});
    ea.table = tb.view(runtime::DType::bf16, {V, dim});
    ea.out = emb.view(runtime::DType::bf16, {3, dim});
    ea.feed = fb.view(runtime::DType::i32, {1, 2});
    ea.prev_tokens = tok.view(runtime::DType::i32, {1});
    ea.ids_out = used.view(runtime::DType::i32, {3});
    jit::launch_embedding(hb->disp->get(jit::EmbeddingFamily::descriptor(jit::Target::host_target())), s, ea);
    s.synchronize();
    CHECK(test::download<int32_t>(be, used, 3) == std::vector<int32_t>{8, 9, 37});
    const auto rows = test::download<uint16_t>(be, emb, size_t(3) * dim);
    CHECK(std::equal(rows.begin() + 2 * dim, rows.end(), table.begin() + 37 * dim));
    const auto r = model::layers::step_result(n, in, test::download<kiln_params::SampleOut>(be, out, 1));
    CHECK(r.seqs[0].token == 37);
}
