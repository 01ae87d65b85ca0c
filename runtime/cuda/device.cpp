#include "runtime/cuda/device.hpp"

#include <fmt/format.h>

#include "runtime/cuda/driver.hpp"

namespace kiln::runtime {

int device_count() { return driver_status().ready() ? driver_status().device_count : 0; }

static int attr(const DriverApi& d, CUdevice dev, CUdevice_attribute a, const char* what) {
    int v = 0;
    cu_check(d.cuDeviceGetAttribute(&v, a, dev), what);
    return v;
}

static CUdevice get_device(const DriverApi& d, int ordinal) {
    if (ordinal < 0 || ordinal >= driver_status().device_count)
        throw InvalidArgument(fmt::format("CUDA device {} does not exist ({} device(s))", ordinal,
                                          driver_status().device_count));
    CUdevice dev = 0;
    cu_check(d.cuDeviceGet(&dev, ordinal), "cuDeviceGet");
    return dev;
}

DeviceProps device_props(int ordinal) {
    const DriverApi& d = driver();
    CUdevice dev = get_device(d, ordinal);
    DeviceProps p;
    p.ordinal = ordinal;
    char name[256] = {};
    cu_check(d.cuDeviceGetName(name, sizeof name - 1, dev), "cuDeviceGetName");
    p.name = name;
    p.cc_major = attr(d, dev, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, "cuDeviceGetAttribute(CC major)");
    p.cc_minor = attr(d, dev, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, "cuDeviceGetAttribute(CC minor)");
    p.sm_count = attr(d, dev, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, "cuDeviceGetAttribute(SM count)");
    p.max_smem_per_block_optin =
        attr(d, dev, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, "cuDeviceGetAttribute(smem optin)");
    p.l2_bytes = attr(d, dev, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, "cuDeviceGetAttribute(L2 size)");
    p.clock_khz = attr(d, dev, CU_DEVICE_ATTRIBUTE_CLOCK_RATE, "cuDeviceGetAttribute(clock)");
    int dom = attr(d, dev, CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, "cuDeviceGetAttribute(PCI domain)");
    int bus = attr(d, dev, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, "cuDeviceGetAttribute(PCI bus)");
    int slot = attr(d, dev, CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, "cuDeviceGetAttribute(PCI device)");
    p.pci_bus_id = fmt::format("{:04x}:{:02x}:{:02x}.0", dom, bus, slot);
    size_t total = 0;
    cu_check(d.cuDeviceTotalMem(&total, dev), "cuDeviceTotalMem");
    p.total_memory = total;
    return p;
}

std::vector<DeviceProps> all_devices() {
    std::vector<DeviceProps> out;
    for (int i = 0; i < device_count(); ++i) out.push_back(device_props(i));
    return out;
}

std::string target_for_compute_capability(int major, int minor) {
    bool arch_specific = (major == 9 && minor == 0) || major == 10 || (major == 11 && minor == 0) || major == 12;
    return fmt::format("sm_{}{}{}", major, minor, arch_specific ? "a" : "");
}

std::string DeviceProps::target() const { return target_for_compute_capability(cc_major, cc_minor); }

Context::Context(int ordinal) : ordinal_(ordinal) {
    const DriverApi& d = driver();
    dev_ = get_device(d, ordinal);
    cu_check(d.cuDevicePrimaryCtxRetain(&ctx_, dev_), "cuDevicePrimaryCtxRetain");
    make_current();
}

Context::~Context() {
    if (ctx_ != nullptr) driver().cuDevicePrimaryCtxRelease(dev_);
}

void Context::make_current() const { cu_check(driver().cuCtxSetCurrent(ctx_), "cuCtxSetCurrent"); }

void Context::synchronize() const {
    make_current();
    cu_check(driver().cuCtxSynchronize(), "cuCtxSynchronize");
}

MemInfo mem_info() {
    size_t f = 0, t = 0;
    cu_check(driver().cuMemGetInfo(&f, &t), "cuMemGetInfo");
    return {f, t};
}

}  // namespace kiln::runtime
