#include "serving/http/generation_request.hpp"

#include <ctime>

#include <fmt/format.h>

#include "model/tokenizer/tokenizer.hpp"
#include "serving/http/prompt.hpp"

namespace kiln::serving::http {

PreparedGeneration prepare_generation(Api api, const Json& body, const ServedModel& model, const RequestLimits& limits,
                                      const std::string& request_id, std::chrono::steady_clock::time_point arrival) {
    SamplingLimits sl;
    sl.max_n = limits.max_n;
    sl.max_logprobs = limits.max_logprobs;
    sl.vocab_size = model.tokenizer->vocab_size();
    ParseOptions po;
    po.defaults = model.defaults;
    po.limits = sl;
    po.max_prompts = limits.max_prompts;

    PreparedGeneration g;
    g.request = api == Api::chat ? parse_chat_request(body, po) : parse_completion_request(body, po);
    const ApiRequest& r = g.request;
    model.check_requested(r.model);

    std::vector<std::vector<TokenId>> prompts;
    if (api == Api::chat) {
        prompts.push_back(render_chat_prompt(model, r.chat));
    } else {
        for (const auto& p : r.prompts) prompts.push_back(encode_completion_prompt(model, p));
    }

    ResponseContext& ctx = g.response;
    for (size_t p = 0; p < prompts.size(); ++p) {
        GenerationRequest e;
        e.id = prompts.size() == 1 ? request_id : fmt::format("{}-{}", request_id, p);
        e.sampling = r.sampling;
        e.sampling.max_tokens = fit_max_tokens(model, api, prompts[p].size(), r.max_tokens, limits.max_prompt_tokens);
        validate_sampling(e.sampling, sl);
        ctx.prompt_tokens.push_back(prompts[p].size());
        e.prompt = std::move(prompts[p]);
        e.arrival = arrival;
        g.engine_requests.push_back(std::move(e));
    }

    ctx.api = api;
    ctx.id = response_id(api, request_id);
    ctx.created = static_cast<int64_t>(std::time(nullptr));
    ctx.model = r.model.value_or(model.name());
    ctx.n = r.sampling.n;
    ctx.logprobs = r.sampling.logprobs.has_value();
    ctx.stream_options = r.stream_options;
    ctx.prompt_tokens_details = limits.prompt_tokens_details;
    ctx.tokenizer = model.tokenizer;
    return g;
}

}  // namespace kiln::serving::http
