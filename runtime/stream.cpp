#include "runtime/stream.hpp"

#include <utility>

#include "runtime/cuda_driver.hpp"

namespace kiln::runtime {

Stream::Stream() { cu_check(driver().cuStreamCreate(&s_, CU_STREAM_NON_BLOCKING), "cuStreamCreate"); }

Stream::~Stream() {
    if (s_ != nullptr) driver().cuStreamDestroy(s_);
}

Stream& Stream::operator=(Stream&& o) noexcept {
    if (this != &o) {
        if (s_ != nullptr) driver().cuStreamDestroy(s_);
        s_ = std::exchange(o.s_, nullptr);
    }
    return *this;
}

void Stream::synchronize() const { cu_check(driver().cuStreamSynchronize(s_), "cuStreamSynchronize"); }

void Stream::begin_capture() {
    cu_check(driver().cuStreamBeginCapture(s_, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), "cuStreamBeginCapture");
}

Stream::Graph Stream::end_capture() {
    Graph g;
    cu_check(driver().cuStreamEndCapture(s_, &g.g_), "cuStreamEndCapture");
    cu_check(driver().cuGraphInstantiateWithFlags(&g.exec_, g.g_, 0), "cuGraphInstantiateWithFlags");
    return g;
}

Stream::Graph::~Graph() {
    if (exec_ != nullptr) driver().cuGraphExecDestroy(exec_);
    if (g_ != nullptr) driver().cuGraphDestroy(g_);
}

Stream::Graph& Stream::Graph::operator=(Graph&& o) noexcept {
    if (this != &o) {
        this->~Graph();
        g_ = std::exchange(o.g_, nullptr);
        exec_ = std::exchange(o.exec_, nullptr);
    }
    return *this;
}

void Stream::Graph::launch(const Stream& s) const { cu_check(driver().cuGraphLaunch(exec_, s.handle()), "cuGraphLaunch"); }

Event::Event(bool timing) {
    cu_check(driver().cuEventCreate(&e_, timing ? CU_EVENT_DEFAULT : CU_EVENT_DISABLE_TIMING), "cuEventCreate");
}

Event::~Event() {
    if (e_ != nullptr) driver().cuEventDestroy(e_);
}

Event& Event::operator=(Event&& o) noexcept {
    if (this != &o) {
        if (e_ != nullptr) driver().cuEventDestroy(e_);
        e_ = std::exchange(o.e_, nullptr);
    }
    return *this;
}

void Event::record(const Stream& s) { cu_check(driver().cuEventRecord(e_, s.handle()), "cuEventRecord"); }
void Event::synchronize() const { cu_check(driver().cuEventSynchronize(e_), "cuEventSynchronize"); }

float Event::elapsed_ms(const Event& start, const Event& end) {
    float ms = 0;
    cu_check(driver().cuEventElapsedTime(&ms, start.e_, end.e_), "cuEventElapsedTime");
    return ms;
}

}  // namespace kiln::runtime
