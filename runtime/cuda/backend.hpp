// The CUDA backend: one device's primary context, its memory (cuMemAlloc) and streams. Every thread that
// issues work through it calls make_current() once first (the context is per thread); the backend's own
// calls make it current themselves.
#pragma once

#include <memory>

#include "runtime/backend.hpp"
#include "runtime/cuda/device.hpp"

namespace kiln::runtime {

class CudaBackend final : public Backend {
public:
    explicit CudaBackend(int ordinal = 0);  // throws NoDevice without a usable device

    BackendKind kind() const override { return BackendKind::cuda; }
    std::string name() const override;
    int compute_units() const override { return props_.sm_count; }
    void make_current() const override { ctx_.make_current(); }

    Buffer alloc(size_t bytes) override;
    std::unique_ptr<Stream> create_stream() override;
    std::unique_ptr<Event> create_event(bool timing = true) override;
    void upload(uint64_t dst, const void* src, size_t bytes) override;
    void download(void* dst, uint64_t src, size_t bytes) override;

    const DeviceProps& props() const { return props_; }
    const Context& context() const { return ctx_; }

protected:
    void free(uint64_t addr, size_t bytes) noexcept override;

private:
    Context ctx_;
    DeviceProps props_;
};

}  // namespace kiln::runtime
