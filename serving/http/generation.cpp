#include "serving/http/generation.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

namespace kiln::serving::http {

using Clock = std::chrono::steady_clock;

// ---- EventQueue ----

EventQueue::EventQueue() : fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
    if (fd_ < 0) throw Error(fmt::format("eventfd: {}", std::strerror(errno)));
}

EventQueue::~EventQueue() { ::close(fd_); }

void EventQueue::push(uint32_t prompt, GenerationEvent&& event) {
    {
        std::lock_guard lock(mu_);
        items_.push_back(Item{prompt, std::move(event), Clock::now()});
    }
    wake();
}

void EventQueue::wake() {
    const uint64_t one = 1;
    // Only fails when the counter would overflow, which leaves it readable anyway.
    [[maybe_unused]] ssize_t w = ::write(fd_, &one, sizeof one);
}

std::vector<EventQueue::Item> EventQueue::take() {
    uint64_t count;
    [[maybe_unused]] ssize_t r = ::read(fd_, &count, sizeof count);
    std::lock_guard lock(mu_);
    std::vector<Item> out(std::make_move_iterator(items_.begin()), std::make_move_iterator(items_.end()));
    items_.clear();
    return out;
}

namespace {

// The engine's view of one prompt of a job.
class PromptSink : public EventSink {
public:
    PromptSink(std::shared_ptr<EventQueue> queue, uint32_t prompt) : queue_(std::move(queue)), prompt_(prompt) {}
    void on_event(GenerationEvent&& event) override { queue_->push(prompt_, std::move(event)); }

private:
    std::shared_ptr<EventQueue> queue_;
    uint32_t prompt_;
};

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

// ---- GenerationJob ----

GenerationJob::GenerationJob(Engine& engine, ServingMetrics& metrics, std::vector<GenerationRequest> requests)
    : engine_(engine),
      metrics_(metrics),
      requests_(std::move(requests)),
      n_(requests_.empty() ? 1 : requests_.front().sampling.n),
      queue_(std::make_shared<EventQueue>()),
      finished_(requests_.size() * n_, false),
      last_token_(finished_.size()),
      tokens_(finished_.size(), 0),
      unfinished_(static_cast<uint32_t>(finished_.size())) {}

GenerationJob::~GenerationJob() {
    if (unfinished_ > 0) {
        cancel_engine_requests();
        record_end();
    }
}

uint64_t GenerationJob::prompt_tokens() const {
    uint64_t t = 0;
    for (const auto& r : requests_) t += r.prompt.size();
    return t;
}

void GenerationJob::submit() {
    try {
        for (uint32_t p = 0; p < requests_.size(); ++p) {
            auto sink = std::make_shared<PromptSink>(queue_, p);
            const RequestHandle h = engine_.submit(requests_[p], std::move(sink));
            std::lock_guard lock(handles_mu_);
            handles_.push_back(h);
        }
    } catch (...) {
        cancel_engine_requests();
        unfinished_ = 0;  // nothing of this job counts as served
        ended_ = true;
        throw;
    }
}

void GenerationJob::cancel_engine_requests() {
    std::vector<RequestHandle> hs;
    {
        std::lock_guard lock(handles_mu_);
        hs = handles_;
    }
    for (RequestHandle h : hs) engine_.cancel(h);
}

void GenerationJob::cancel() {
    cancel_requested_ = true;
    queue_->wake();
}

void GenerationJob::record_end() {
    if (ended_) return;
    ended_ = true;
    bool completed = true;
    for (size_t c = 0; c < finished_.size(); ++c) {
        if (finished_[c]) continue;
        // Cancelled here: the engine still sends these sequences' abort events, to a queue nobody reads.
        metrics_.sequence_finished(FinishReason::abort);
        completed = false;
    }
    unfinished_ = 0;
    uint64_t generated = 0;
    for (uint64_t t : tokens_) generated += t;
    std::optional<double> e2e;
    if (completed && !requests_.empty()) e2e = seconds(Clock::now() - requests_.front().arrival);
    metrics_.request_finished(e2e, prompt_tokens(), generated);
}

GenerationJob::Status GenerationJob::pump(const ClientConnection& conn,
                                          const std::function<bool(uint32_t, const GenerationEvent&)>& on_event) {
    const Clock::time_point arrival = requests_.empty() ? Clock::now() : requests_.front().arrival;
    while (unfinished_ > 0) {
        if (cancel_requested_) {
            cancel_engine_requests();
            record_end();
            return Status::cancelled;
        }
        std::vector<EventQueue::Item> items = queue_->take();
        for (auto& item : items) {
            const GenerationEvent& e = item.event;
            if (e.index >= n_ || item.prompt >= requests_.size())
                throw Error(
                    fmt::format("the engine sent an event for sequence {} of a request with n={}", e.index, n_));
            const uint32_t choice = item.prompt * n_ + e.index;
            if (finished_[choice]) continue;  // nothing may follow a final event
            if (!e.tokens.empty()) {
                if (!first_token_seen_) {
                    first_token_seen_ = true;
                    metrics_.observe_ttft(seconds(item.at - arrival));
                }
                if (last_token_[choice] != Clock::time_point{})
                    metrics_.observe_inter_token(seconds(item.at - last_token_[choice]));
                last_token_[choice] = item.at;
                tokens_[choice] += e.tokens.size();
            }
            if (e.finish) {
                finished_[choice] = true;
                --unfinished_;
                metrics_.sequence_finished(*e.finish);
            }
            if (!on_event(choice, e)) {
                cancel_engine_requests();
                record_end();
                return Status::client_gone;
            }
        }
        if (unfinished_ == 0) break;
        if (conn.closed() ||
            (items.empty() && wait_for_wake_or_close(queue_->wake_fd(), conn, 1000) == WaitResult::closed)) {
            cancel_engine_requests();
            record_end();
            return Status::client_gone;
        }
    }
    record_end();
    return Status::done;
}

}  // namespace kiln::serving::http
