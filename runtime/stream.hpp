// Streams and events (RAII over CUstream / CUevent). Create them with the owning Context current.
// Event::elapsed_ms(start, end) is the device time between two recorded events.
#pragma once

#include <cuda.h>

namespace kiln::runtime {

class Stream {
public:
    Stream();  // a non-blocking stream in the current context
    ~Stream();
    Stream(Stream&& o) noexcept : s_(o.s_) { o.s_ = nullptr; }
    Stream& operator=(Stream&& o) noexcept;
    Stream(const Stream&) = delete;
    Stream& operator=(const Stream&) = delete;

    CUstream handle() const { return s_; }
    void synchronize() const;

    // Graph capture of the work enqueued between begin_capture and end_capture, then replay.
    void begin_capture();
    class Graph;
    Graph end_capture();

private:
    CUstream s_ = nullptr;
};

// An instantiated graph captured from a stream.
class Stream::Graph {
public:
    Graph() = default;
    ~Graph();
    Graph(Graph&& o) noexcept : g_(o.g_), exec_(o.exec_) { o.g_ = nullptr; o.exec_ = nullptr; }
    Graph& operator=(Graph&&) noexcept;
    Graph(const Graph&) = delete;
    Graph& operator=(const Graph&) = delete;

    void launch(const Stream& s) const;

private:
    friend class Stream;
    CUgraph g_ = nullptr;
    CUgraphExec exec_ = nullptr;
};

class Event {
public:
    explicit Event(bool timing = true);
    ~Event();
    Event(Event&& o) noexcept : e_(o.e_) { o.e_ = nullptr; }
    Event& operator=(Event&& o) noexcept;
    Event(const Event&) = delete;
    Event& operator=(const Event&) = delete;

    void record(const Stream& s);
    void synchronize() const;
    CUevent handle() const { return e_; }

    // Milliseconds between two recorded (and completed) events.
    static float elapsed_ms(const Event& start, const Event& end);

private:
    CUevent e_ = nullptr;
};

}  // namespace kiln::runtime
