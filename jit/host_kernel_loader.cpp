#include "jit/host_kernel_loader.hpp"

#include <mutex>

#include <fmt/format.h>

#include "jit/kernel_key.hpp"
#include "runtime/error.hpp"

namespace kiln::jit {

static std::unique_ptr<StoreHostObjectCache> make_object_cache(cache::Store* store) {
    return store ? std::make_unique<StoreHostObjectCache>(*store) : nullptr;
}

HostKernelLoader::HostKernelLoader(HostLoaderOptions options)
    : opt_(std::move(options)),
      families_(opt_.families ? *opt_.families : builtin_families()),
      templates_(opt_.templates ? *opt_.templates : TemplateStore::instance()),
      objects_(make_object_cache(opt_.store)),
      compiler_(HostCompiler::Options{opt_.target, objects_.get()}) {}

HostKernelLoader::~HostKernelLoader() = default;

KernelDescriptor HostKernelLoader::canonical(const KernelDescriptor& d) const {
    if (!d.target.is_host())
        throw InvalidArgument(fmt::format("host kernel loader: {} is not for the host target", to_string(d)));
    const Family& f = families_.get(d.family.view());
    return f.canonicalize(d);
}

HostKernelSource HostKernelLoader::source(const KernelDescriptor& c) const {
    const Family& f = families_.get(c.family.view());
    HostSource hs = f.host_source(c);
    HostKernelSource s;
    s.name = to_string(c);
    s.source = std::move(hs.source);
    s.headers = collect_template_headers(s.source, templates_);
    s.entries = {hs.entry};
    s.columns.family = std::string(c.family.view());
    s.columns.mode = std::string(c.mode.view());
    s.columns.m = c.m;
    s.columns.n = c.n;
    s.columns.k = c.k;
    s.columns.experts = c.experts;
    s.columns.weight_format = c.weight_format == WeightFormat::none ? "" : to_string(c.weight_format);
    s.columns.act_dtype = runtime::to_string(c.act_dtype);
    s.columns.config = cache_config_text(c);
    s.columns.kernel_name = hs.entry;
    return s;
}

const LoadedKernel& HostKernelLoader::load_slow(const KernelDescriptor& d) {
    KernelDescriptor c = canonical(d);
    {
        std::shared_lock lock(map_mu_);
        if (auto it = map_.find(c); it != map_.end()) {
            lock.unlock();
            std::unique_lock wl(map_mu_);
            map_.emplace(d, it->second);
            return *it->second;
        }
    }
    const Family& f = families_.get(c.family.view());
    HostKernelSource src = source(c);
    // The compiler memoises per content key: concurrent callers share one compile.
    std::shared_ptr<const HostKernelModule> mod = compiler_.load(src);
    auto k = std::make_unique<LoadedKernel>();
    k->desc = c;
    k->key = mod->key();
    k->host_entry = reinterpret_cast<kiln_host_entry>(mod->entry(src.entries.front()));
    k->host_scratch_bytes = f.host_source(c).scratch_bytes;
    k->finish();

    std::unique_lock lock(map_mu_);
    if (auto it = map_.find(c); it != map_.end()) {  // another thread got here first
        map_.emplace(d, it->second);
        return *it->second;
    }
    const LoadedKernel* p = k.get();
    owned_.push_back(std::move(k));
    modules_.emplace(p, std::move(mod));
    map_.emplace(c, p);
    map_.emplace(d, p);
    return *p;
}

const HostCompileStats& HostKernelLoader::stats(const LoadedKernel& k) const {
    std::shared_lock lock(map_mu_);
    auto it = modules_.find(&k);
    if (it == modules_.end()) throw NotFound(fmt::format("kernel {} was not loaded by this loader", to_string(k.desc)));
    return it->second->stats();
}

HostBuildResult HostKernelLoader::build(const KernelDescriptor& d) {
    KernelDescriptor c = canonical(d);
    HostKernelSource src = source(c);
    HostBuildResult r;
    r.desc = c;
    r.key = compiler_.key(src);
    r.target = compiler_.target().name();
    r.stats = compiler_.build(src);
    return r;
}

}  // namespace kiln::jit
