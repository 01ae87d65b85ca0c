#include "jit/dispatcher.hpp"

#include <ctime>

#include <fmt/format.h>

#include "jit/kernel_key.hpp"
#include "jit/nvrtc.hpp"
#if KILN_HAVE_HOST_JIT
#include "jit/host_kernel_loader.hpp"
#endif
#include "runtime/cuda/driver.hpp"
#include "runtime/cuda/device.hpp"
#include "runtime/log.hpp"

namespace kiln::jit {

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

std::once_flag g_identity_warning, g_header_warning;

}  // namespace

Dispatcher::Dispatcher(DispatcherOptions options)
    : opt_(options),
      families_(options.families ? *options.families : builtin_families()),
      templates_(options.templates ? *options.templates : TemplateStore::instance()) {}

Dispatcher::~Dispatcher() {
    // Libraries unload in LoadedKernel destructors; keep the context retained until they are gone.
    std::lock_guard<std::mutex> lock(owned_mu_);
    owned_.clear();
}

runtime::Context& Dispatcher::context() {
    std::lock_guard<std::mutex> lock(ctx_mu_);
    if (!ctx_) ctx_ = std::make_unique<runtime::Context>(opt_.device);
    return *ctx_;
}

Target Dispatcher::device_target() {
    runtime::DeviceProps p = runtime::device_props(opt_.device);
    return parse_target(p.target());
}

Dispatcher::Stats Dispatcher::stats() const { return {compiles_.load(), store_hits_.load(), loads_.load()}; }

Dispatcher::LoadTiming Dispatcher::timing(const LoadedKernel& k) const {
    std::lock_guard<std::mutex> lock(owned_mu_);
    auto it = timings_.find(&k);
    return it == timings_.end() ? LoadTiming{} : it->second;
}

BuildResult Dispatcher::build(const KernelDescriptor& d) {
    const Family& f = families_.get(d.family.view());
    KernelDescriptor c = f.canonicalize(d);
    if (c.target.is_host()) return build_host(c);
    Obtained o = obtain(c);
    const cache::ArtifactInfo& i = o.artifact.info;
    BuildResult r;
    r.desc = c;
    r.key = i.key;
    r.cache_hit = o.hit;
    r.layer = o.hit ? i.layer : "";
    r.kernel_name = i.kernel_name;
    r.target = i.target;
    r.compiler = i.compiler;
    r.compile_ms = i.compile_ms;
    r.bytes = o.artifact.blob.size();
    return r;
}

Dispatcher::Obtained Dispatcher::obtain(const KernelDescriptor& c) {
    const Family& f = families_.get(c.family.view());
    KernelRecipe recipe = make_recipe(f, c, templates_);
    const std::string identity = compiler_identity();
    const cache::ContentKey key = content_key(recipe, identity);
    if (opt_.store != nullptr) {
        if (auto a = opt_.store->get(key, cache::ArtifactKind::cubin)) {
            store_hits_.fetch_add(1, std::memory_order_relaxed);
            return Obtained{std::move(*a), true};
        }
    }
    std::shared_ptr<const Obtained> o = compile_flight_.run(
        key, [&] { return std::make_shared<const Obtained>(compile(c, recipe, key, identity)); });
    return *o;
}

Dispatcher::Obtained Dispatcher::compile(const KernelDescriptor& c, const KernelRecipe& recipe, cache::ContentKey key,
                                         const std::string& identity) {
    Nvrtc* nvrtc = nullptr;
    try {
        nvrtc = &Nvrtc::instance();
    } catch (const ToolkitNotFound& e) {
        throw ToolkitNotFound(fmt::format("kernel {} is not in the kernel cache and cannot be compiled: {}",
                                          to_string(c), e.what()));
    }
    const std::string actual = nvrtc->identity();
    if (actual != identity) {
        // The artifact is keyed by the compiler that builds it; look for it under that key first.
        std::call_once(g_identity_warning, [&] {
            log::warn("NVRTC is {} but kernel keys assumed {}; set KILN_NVRTC_VERSION={}.{} so cached kernels are found "
                      "without loading NVRTC",
                      actual, identity, nvrtc->major(), nvrtc->minor());
        });
        key = content_key(recipe, actual);
        if (opt_.store != nullptr) {
            if (auto a = opt_.store->get(key, cache::ArtifactKind::cubin)) {
                store_hits_.fetch_add(1, std::memory_order_relaxed);
                return Obtained{std::move(*a), true};
            }
        }
    }
    cache::Store::Lease lease;
    if (opt_.store != nullptr) {
        lease = opt_.store->lease(key, opt_.lease_timeout);
        // Another process may have compiled it while we waited for the lease.
        if (auto a = opt_.store->get(key, cache::ArtifactKind::cubin)) {
            store_hits_.fetch_add(1, std::memory_order_relaxed);
            return Obtained{std::move(*a), true};
        }
    }
    CudaHeaders headers = locate_cuda_headers();
    if (headers.cuda_version != 0 &&
        (headers.cuda_version / 1000 != nvrtc->major() || (headers.cuda_version % 1000) / 10 != nvrtc->minor())) {
        std::call_once(g_header_warning, [&] {
            log::warn("CUDA headers in {} are version {} but NVRTC is {}.{}; kernel keys assume they match",
                      headers.include, runtime::format_cuda_version(headers.cuda_version), nvrtc->major(),
                      nvrtc->minor());
        });
    }
    NvrtcOutput out = nvrtc->compile(nvrtc_program(recipe, headers));
    compiles_.fetch_add(1, std::memory_order_relaxed);
    if (!out.log.empty()) log::debug("NVRTC log for {}:\n{}", to_string(c), out.log);
    log::info("compiled {} in {:.1f} ms ({} bytes, key {})", to_string(c), out.compile_ms, out.cubin.size(), key.hex());

    Obtained o;
    cache::ArtifactInfo& i = o.artifact.info;
    i.key = key;
    i.kind = cache::ArtifactKind::cubin;
    i.family = std::string(c.family.view());
    i.mode = std::string(c.mode.view());
    i.m = c.m;
    i.n = c.n;
    i.k = c.k;
    i.experts = c.experts;
    i.weight_format = c.weight_format == WeightFormat::none ? "" : to_string(c.weight_format);
    i.act_dtype = runtime::to_string(c.act_dtype);
    i.target = to_string(c.target);
    i.config = cache_config_text(c);
    i.kernel_name = out.lowered_name;
    i.compiler = actual;
    i.compile_ms = out.compile_ms;
    i.bytes = out.cubin.size();  // the store fills sha256
    i.created_at = static_cast<int64_t>(std::time(nullptr));
    i.last_used = i.created_at;
    o.artifact.blob = std::move(out.cubin);
    if (opt_.store != nullptr) opt_.store->put(o.artifact);
    return o;
}

const LoadedKernel& Dispatcher::load_slow(const KernelDescriptor& d) {
    if (d.target.is_host()) return load_host(d);
    const LoadedKernel* k = load_flight_.run(d, [&]() -> const LoadedKernel* {
        if (const LoadedKernel* hit = map_.find(d)) return hit;
        const Family& f = families_.get(d.family.view());
        const KernelDescriptor c = f.canonicalize(d);
        if (!(c == d)) {
            if (const LoadedKernel* hit = map_.find(c)) return map_.insert(d, hit);
        }
        runtime::Context& ctx = context();  // throws NoDevice before any compile work

        auto t0 = Clock::now();
        Obtained o = obtain(c);
        LoadTiming timing;
        timing.fetch_ms = ms_since(t0);
        timing.compiled = !o.hit;
        if (timing.compiled) timing.compile_ms = o.artifact.info.compile_ms;

        auto t1 = Clock::now();
        ctx.make_current();
        auto lk = std::make_unique<LoadedKernel>();
        lk->desc = c;
        lk->key = o.artifact.info.key;
        lk->library = runtime::Library::load(o.artifact.blob.data(), o.artifact.blob.size());
        lk->kernel = lk->library.kernel(o.artifact.info.kernel_name);
        lk->dynamic_smem = f.max_dynamic_smem(c);
        if (lk->dynamic_smem > 0) lk->kernel.set_max_dynamic_smem(static_cast<int>(lk->dynamic_smem), ctx.device());
        if (const uint32_t carveout = f.preferred_smem_carveout(c))
            lk->kernel.set_preferred_smem_carveout(static_cast<int>(carveout), ctx.device());
        lk->kernel.load_into_current_context();
        lk->finish();
        timing.load_ms = ms_since(t1);
        loads_.fetch_add(1, std::memory_order_relaxed);

        const LoadedKernel* mine = lk.get();
        {
            std::lock_guard<std::mutex> lock(owned_mu_);
            timings_.emplace(mine, timing);
            owned_.push_back(std::move(lk));
        }
        // Another request (through a different non-canonical descriptor) may have loaded it first.
        const LoadedKernel* winner = map_.insert(c, mine);
        return map_.insert(d, winner);
    });
    return *k;
}

#if KILN_HAVE_HOST_JIT
HostKernelLoader& Dispatcher::host_loader() {
    std::lock_guard<std::mutex> lock(host_mu_);
    if (!host_) {
        HostLoaderOptions o;
        o.store = opt_.store;
        o.families = &families_;
        o.templates = &templates_;
        host_ = std::make_unique<HostKernelLoader>(o);
    }
    return *host_;
}

// The host loader memoises by descriptor itself; the entry also goes into the dispatcher's map so
// later get() calls take the one-lookup path.
const LoadedKernel& Dispatcher::load_host(const KernelDescriptor& d) {
    HostKernelLoader& loader = host_loader();
    const LoadedKernel& k = loader.get(d);
    loads_.fetch_add(1, std::memory_order_relaxed);
    {
        // each host kernel counts once, as a compile or a store hit (requested and canonical descriptors
        // of one kernel reach here separately)
        std::lock_guard<std::mutex> lock(host_mu_);
        if (host_counted_.insert(&k).second)
            (loader.stats(k).cache_hit ? store_hits_ : compiles_).fetch_add(1, std::memory_order_relaxed);
    }
    return *map_.insert(d, &k);
}

BuildResult Dispatcher::build_host(const KernelDescriptor& c) {
    HostBuildResult h = host_loader().build(c);
    BuildResult r;
    r.desc = h.desc;
    r.key = h.key;
    r.cache_hit = h.stats.cache_hit;
    r.kernel_name = families_.get(c.family.view()).host_source(c).entry;
    r.target = h.target;
    r.compiler = "llvm-" + HostCompiler::llvm_version();
    r.compile_ms = h.stats.frontend_ms + h.stats.optimize_ms + h.stats.codegen_ms;
    r.bytes = h.stats.object_bytes;
    if (r.cache_hit) {
        store_hits_.fetch_add(1, std::memory_order_relaxed);
        if (opt_.store != nullptr)
            if (auto info = opt_.store->find(r.key.hex())) {
                r.layer = info->layer;
                r.compile_ms = info->compile_ms;
            }
    } else {
        compiles_.fetch_add(1, std::memory_order_relaxed);
    }
    return r;
}
#else
const LoadedKernel& Dispatcher::load_host(const KernelDescriptor& d) {
    throw InvalidArgument(fmt::format("{}: this kiln was built without the host JIT (-Dhost_jit=disabled)", to_string(d)));
}

BuildResult Dispatcher::build_host(const KernelDescriptor& c) {
    throw InvalidArgument(fmt::format("{}: this kiln was built without the host JIT (-Dhost_jit=disabled)", to_string(c)));
}
#endif

}  // namespace kiln::jit
