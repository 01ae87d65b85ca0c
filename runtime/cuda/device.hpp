// CUDA devices: properties, the compile target they call for, and their primary context.
//
// All of these go through the dlopen'ed driver (runtime/cuda/driver.hpp) and throw NoDevice when there
// is none; device_count() alone returns 0 instead. A Context retains the device's primary context (the
// one the CUDA runtime and other libraries share) and makes it current on the calling thread; every
// thread that issues work calls make_current() first.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <cuda.h>

namespace kiln::runtime {

struct DeviceProps {
    int ordinal = 0;
    std::string name;
    int cc_major = 0, cc_minor = 0;
    int sm_count = 0;
    uint64_t total_memory = 0;       // bytes
    int max_smem_per_block_optin = 0;  // bytes of dynamic shared memory a kernel may opt into
    int l2_bytes = 0;
    int clock_khz = 0;
    std::string pci_bus_id;          // "0000:3b:00.0"

    // The NVRTC target for this device: "sm_90a" for compute capability 9.0 (the arch-specific variant
    // where one exists), "sm_89" otherwise.
    std::string target() const;
};

// Number of CUDA devices; 0 without a usable driver (never throws).
int device_count();
// Throws NoDevice without a driver, InvalidArgument for a bad ordinal.
DeviceProps device_props(int ordinal);
std::vector<DeviceProps> all_devices();

// "sm_90a" for (9, 0). Archs with arch-specific ('a') features get the suffix: 9.0, 10.x, 11.0, 12.x.
std::string target_for_compute_capability(int major, int minor);

class Context {
public:
    explicit Context(int ordinal = 0);
    ~Context();
    Context(const Context&) = delete;
    Context& operator=(const Context&) = delete;

    void make_current() const;
    void synchronize() const;
    int ordinal() const { return ordinal_; }
    CUdevice device() const { return dev_; }
    CUcontext handle() const { return ctx_; }

private:
    int ordinal_;
    CUdevice dev_ = 0;
    CUcontext ctx_ = nullptr;
};

// Free and total device memory of the current context's device.
struct MemInfo {
    uint64_t free = 0, total = 0;
};
MemInfo mem_info();

}  // namespace kiln::runtime
