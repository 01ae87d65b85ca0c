#include "jit/host_compiler.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <future>
#include <mutex>
#include <unordered_map>

#include <fmt/format.h>

#include <clang/Basic/DiagnosticOptions.h>
#include <clang/CodeGen/CodeGenAction.h>
#include <clang/Frontend/CompilerInstance.h>
#include <clang/Frontend/CompilerInvocation.h>
#include <clang/Frontend/TextDiagnosticPrinter.h>
#include <clang/Lex/PreprocessorOptions.h>

#include <llvm/ADT/StringMap.h>
#include <llvm/Config/llvm-config.h>
#include <llvm/ExecutionEngine/ObjectCache.h>
#include <llvm/ExecutionEngine/Orc/CompileUtils.h>
#include <llvm/ExecutionEngine/Orc/ExecutionUtils.h>
#include <llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h>
#include <llvm/ExecutionEngine/Orc/LLJIT.h>
#include <llvm/ExecutionEngine/Orc/ThreadSafeModule.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Verifier.h>
#include <llvm/MC/MCSubtargetInfo.h>
#include <llvm/Passes/PassBuilder.h>
#if LLVM_VERSION_MAJOR >= 16
#include <llvm/TargetParser/Host.h>
#else
#include <llvm/Support/Host.h>
#endif
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Target/TargetMachine.h>
#if LLVM_VERSION_MAJOR >= 14
#include <llvm/MC/TargetRegistry.h>
#else
#include <llvm/Support/TargetRegistry.h>
#endif

#include "kiln_config.h"
#include "runtime/host/kernel_abi.h"
#include "runtime/log.hpp"

namespace kiln::jit {

namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

std::atomic<uint64_t> g_clang_invocations{0};
// The clang front end shares global state (e.g. option tables, signal handlers): one at a time in
// the whole process.
std::mutex g_frontend_mu;

// Headers and the main file live under this virtual directory; nothing real is read from it.
constexpr const char* k_virtual_root = "/kiln-host-templates";
constexpr const char* k_pipeline = "new-pm O3 (loop+slp vectorize, unroll, interleave); codegen aggressive; pic; small code model";

void init_llvm_once() {
    static std::once_flag once;
    std::call_once(once, [] {
        llvm::InitializeNativeTarget();
        llvm::InitializeNativeTargetAsmPrinter();
        llvm::InitializeNativeTargetAsmParser();
    });
}

std::string take_error(llvm::Error e) { return llvm::toString(std::move(e)); }

template <typename T>
T check(llvm::Expected<T> v, std::string_view what) {
    if (!v) throw HostCompileError(fmt::format("{}: {}", what, take_error(v.takeError())));
    return std::move(*v);
}
template <typename T>
T& check(llvm::Expected<T&> v, std::string_view what) {
    if (!v) throw HostCompileError(fmt::format("{}: {}", what, take_error(v.takeError())));
    return *v;
}
void check(llvm::Error e, std::string_view what) {
    if (e) throw HostCompileError(fmt::format("{}: {}", what, take_error(std::move(e))));
}

std::vector<std::string> host_feature_list() {
    llvm::StringMap<bool> m;
    std::vector<std::string> out;
    if (llvm::sys::getHostCPUFeatures(m))
        for (auto& kv : m) out.push_back((kv.second ? "+" : "-") + kv.first().str());
    std::sort(out.begin(), out.end(), [](const std::string& a, const std::string& b) {
        return a.substr(1) < b.substr(1);
    });
    return out;
}

const llvm::Target& lookup_target(const std::string& triple) {
    init_llvm_once();
    std::string err;
    const llvm::Target* t = llvm::TargetRegistry::lookupTarget(triple, err);
    if (!t) throw HostCompileError(fmt::format("no LLVM target for triple {}: {}", triple, err));
    return *t;
}

// Where clang's builtin headers (stddef.h, stdint.h, ...) live: lib/clang/<version> under the
// LLVM install kiln was built against (the full version up to LLVM 15, the major one from 16);
// "" when that is absent (a relocated bundle). The kiln templates need none of them.
const std::string& resource_dir() {
    static const std::string dir = [] {
        for (const std::string v : {std::string(LLVM_VERSION_STRING), std::to_string(LLVM_VERSION_MAJOR)}) {
            std::string d = fmt::format("{}/clang/{}", KILN_LLVM_LIBDIR, v);
            std::error_code ec;
            if (std::filesystem::is_directory(d + "/include", ec)) return d;
        }
        log::debug("clang builtin headers not found under {}/clang: host kernels see no builtin headers",
                   KILN_LLVM_LIBDIR);
        return std::string();
    }();
    return dir;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// HostTarget

HostTarget HostTarget::detect() {
    HostTarget t;
    t.triple = llvm::sys::getProcessTriple();
    t.cpu = llvm::sys::getHostCPUName().str();
    t.features = host_feature_list();
    // A CPU newer than this LLVM is reported as "generic", which clang does not accept as an x86 CPU
    // name. Fall back to the architecture's baseline name: the detected features (in the key) still
    // describe the machine, so the code uses what the CPU has.
    const std::string arch = t.triple.substr(0, t.triple.find('-'));
    const bool x86 = arch == "x86_64" || arch == "i686" || arch == "i386";
    const llvm::Target& target = lookup_target(t.triple);
    std::unique_ptr<llvm::MCSubtargetInfo> base(target.createMCSubtargetInfo(t.triple, "", ""));
    if ((x86 && t.cpu == "generic") || (base && !base->isCPUStringValid(t.cpu))) {
        const std::string fallback = arch == "x86_64" ? "x86-64" : x86 ? "i686" : "generic";
        log::debug("host CPU '{}' is unknown to LLVM {}; compiling for '{}' with the detected features", t.cpu,
                   LLVM_VERSION_STRING, fallback);
        t.cpu = fallback;
    }
    return t;
}

HostTarget HostTarget::for_cpu(const std::string& cpu) {
    HostTarget t;
    t.triple = llvm::sys::getProcessTriple();
    t.cpu = cpu;
    const llvm::Target& target = lookup_target(t.triple);
    std::unique_ptr<llvm::MCSubtargetInfo> generic(target.createMCSubtargetInfo(t.triple, "", ""));
    if (!generic || !generic->isCPUStringValid(cpu))
        throw InvalidArgument(fmt::format("'{}' is not a CPU LLVM {} knows for {}", cpu, LLVM_VERSION_STRING, t.triple));
    std::unique_ptr<llvm::MCSubtargetInfo> sti(target.createMCSubtargetInfo(t.triple, cpu, ""));
    // The same feature names the host detection reports, set as this CPU implies them.
    for (const std::string& f : host_feature_list()) {
        std::string name = f.substr(1);
        t.features.push_back((sti->checkFeatures("+" + name) ? "+" : "-") + name);
    }
    return t;
}

std::string HostTarget::name() const { return fmt::format("host-{}-{}", triple, cpu); }

std::string HostTarget::feature_string() const { return fmt::format("{}", fmt::join(features, ",")); }

bool HostTarget::runs_on(const HostTarget& machine) const {
    if (triple != machine.triple) return false;
    for (const std::string& f : features) {
        if (f.empty() || f[0] != '+') continue;
        if (std::find(machine.features.begin(), machine.features.end(), f) == machine.features.end()) return false;
    }
    return true;
}

// ---------------------------------------------------------------------------------------------
// HostKernelModule

void* HostKernelModule::entry(std::string_view name) const {
    auto it = entries_.find(name);
    if (it == entries_.end())
        throw NotFound(fmt::format("host kernel module {} has no entry point '{}'", key_.hex(), name));
    return it->second;
}

// ---------------------------------------------------------------------------------------------
// HostCompiler

namespace {

// LLVM's ObjectCache hook over kiln's object cache. The module identifier is the content key.
class ObjectCacheBridge final : public llvm::ObjectCache {
public:
    ObjectCacheBridge(HostObjectCache* backing, std::string target_name)
        : backing_(backing), target_name_(std::move(target_name)) {}

    struct Pending {
        cache::ArtifactInfo info;  // columns to store with the object
        double compile_ms_before_codegen = 0;
        Clock::time_point codegen_start;
        uint64_t object_bytes = 0;
        bool compiled = false;
        bool from_cache = false;
    };
    // Set by the compiler (under its codegen mutex) before handing a module to codegen.
    std::unordered_map<std::string, Pending> pending;

    void notifyObjectCompiled(const llvm::Module* m, llvm::MemoryBufferRef obj) override {
        auto it = pending.find(m->getModuleIdentifier());
        if (it == pending.end()) return;
        Pending& p = it->second;
        p.compiled = true;
        p.object_bytes = obj.getBufferSize();
        if (!backing_) return;
        cache::Artifact a;
        a.info = p.info;
        a.info.compile_ms = p.compile_ms_before_codegen + ms_since(p.codegen_start);
        a.info.bytes = obj.getBufferSize();
        a.blob.assign(obj.getBufferStart(), obj.getBufferEnd());
        backing_->store(a);
    }

    std::unique_ptr<llvm::MemoryBuffer> getObject(const llvm::Module* m) override {
        if (!backing_) return nullptr;
        cache::ContentKey key;
        try {
            key = cache::ContentKey::parse(m->getModuleIdentifier());
        } catch (const Error&) {
            return nullptr;  // not one of ours
        }
        auto blob = backing_->load(key, target_name_);
        if (!blob) return nullptr;
        auto it = pending.find(m->getModuleIdentifier());
        if (it != pending.end()) {
            it->second.from_cache = true;
            it->second.object_bytes = blob->size();
        }
        return llvm::MemoryBuffer::getMemBufferCopy(
            llvm::StringRef(reinterpret_cast<const char*>(blob->data()), blob->size()), m->getModuleIdentifier());
    }

private:
    HostObjectCache* backing_;
    std::string target_name_;
};

}  // namespace

struct HostCompiler::Impl {
    HostTarget target;
    bool native = false;
    HostObjectCache* cache = nullptr;
    std::vector<std::string> options;  // canonical front-end options (keyed)
    std::unique_ptr<llvm::TargetMachine> tm;  // the one TargetMachine: IR optimiser + codegen
    std::unique_ptr<ObjectCacheBridge> bridge;
    std::unique_ptr<llvm::orc::LLJIT> jit;  // created on first load()
    std::mutex codegen_mu;                  // tm, bridge, jit

    std::mutex memo_mu;
    std::unordered_map<cache::ContentKey, std::shared_future<std::shared_ptr<const HostKernelModule>>,
                       cache::ContentKeyHash>
        memo;

    llvm::orc::JITTargetMachineBuilder jtmb() const {
        llvm::orc::JITTargetMachineBuilder b{llvm::Triple(target.triple)};
        b.setCPU(target.cpu);
        b.addFeatures(target.features);
#if LLVM_VERSION_MAJOR >= 18
        b.setCodeGenOptLevel(llvm::CodeGenOptLevel::Aggressive);
#else
        b.setCodeGenOptLevel(llvm::CodeGenOpt::Aggressive);
#endif
        b.setRelocationModel(llvm::Reloc::PIC_);
        b.setCodeModel(llvm::CodeModel::Small);
        return b;
    }

    void ensure_jit() {
        if (jit) return;
        auto* self = this;
        auto j = check(llvm::orc::LLJITBuilder()
                           .setJITTargetMachineBuilder(jtmb())
                           .setCompileFunctionCreator(
                               [self](llvm::orc::JITTargetMachineBuilder)
                                   -> llvm::Expected<std::unique_ptr<llvm::orc::IRCompileLayer::IRCompiler>> {
                                   return std::make_unique<llvm::orc::SimpleCompiler>(*self->tm, self->bridge.get());
                               })
                           .create(),
                       "creating the LLVM JIT");
        jit = std::move(j);
    }

    std::unique_ptr<llvm::Module> front_end(const HostKernelSource& src, llvm::LLVMContext& ctx) {
        std::lock_guard lk(g_frontend_mu);
        g_clang_invocations.fetch_add(1, std::memory_order_relaxed);

        const std::string main_file = fmt::format("{}/kernel.cpp", k_virtual_root);
        std::vector<std::string> args = options;
        if (const std::string& rdir = resource_dir(); !rdir.empty())
            args.insert(args.end(), {"-resource-dir", rdir, "-internal-isystem", rdir + "/include"});
        args.push_back(main_file);
        std::vector<const char*> argv;
        argv.reserve(args.size());
        for (const auto& a : args) argv.push_back(a.c_str());

        std::string diag_text;
        llvm::raw_string_ostream diag_os(diag_text);
        llvm::IntrusiveRefCntPtr<clang::DiagnosticOptions> diag_opts(new clang::DiagnosticOptions());
        auto ci = std::make_unique<clang::CompilerInstance>();
        ci->createDiagnostics(new clang::TextDiagnosticPrinter(diag_os, diag_opts.get()), /*ShouldOwnClient=*/true);
        ci->setVerboseOutputStream(diag_os);  // "N errors generated." goes with the diagnostics
        if (!clang::CompilerInvocation::CreateFromArgs(ci->getInvocation(), argv, ci->getDiagnostics())) {
            diag_os.flush();
            throw HostCompileError(fmt::format("host kernel {}: bad front-end options: {}", src.name, diag_text));
        }
        auto& pp = ci->getInvocation().getPreprocessorOpts();
        pp.RetainRemappedFileBuffers = false;  // clang owns and frees the buffers below
        pp.addRemappedFile(main_file, llvm::MemoryBuffer::getMemBufferCopy(src.source, main_file).release());
        for (const auto& [name, bytes] : src.headers) {
            std::string path = fmt::format("{}/{}", k_virtual_root, name);
            pp.addRemappedFile(path, llvm::MemoryBuffer::getMemBufferCopy(bytes, path).release());
        }

        clang::EmitLLVMOnlyAction action(&ctx);
        bool ok = ci->ExecuteAction(action);
        diag_os.flush();
        std::unique_ptr<llvm::Module> m = ok ? action.takeModule() : nullptr;
        if (!m) {
            // Drop the virtual directory from messages: they should name template files.
            std::string prefix = std::string(k_virtual_root) + "/";
            for (size_t p; (p = diag_text.find(prefix)) != std::string::npos;) diag_text.erase(p, prefix.size());
            throw HostCompileError(fmt::format("host kernel {}: clang failed:\n{}", src.name, diag_text));
        }
        return m;
    }

    void optimize(llvm::Module& m) {
        llvm::PipelineTuningOptions pto;
        pto.LoopVectorization = true;
        pto.SLPVectorization = true;
        pto.LoopUnrolling = true;
        pto.LoopInterleaving = true;
        llvm::PassBuilder pb(tm.get(), pto);
        llvm::LoopAnalysisManager lam;
        llvm::FunctionAnalysisManager fam;
        llvm::CGSCCAnalysisManager cgam;
        llvm::ModuleAnalysisManager mam;
        pb.registerModuleAnalyses(mam);
        pb.registerCGSCCAnalyses(cgam);
        pb.registerFunctionAnalyses(fam);
        pb.registerLoopAnalyses(lam);
        pb.crossRegisterProxies(lam, fam, cgam, mam);
        llvm::ModulePassManager mpm = pb.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O3);
        mpm.run(m, mam);
    }

    // clang → IR → O3, with the module ready for codegen (identifier = key, target layout).
    // Fills frontend_ms / optimize_ms.
    std::unique_ptr<llvm::Module> make_ir(const HostKernelSource& src, const cache::ContentKey& key,
                                          llvm::LLVMContext& ctx, HostCompileStats& st) {
        auto t0 = Clock::now();
        std::unique_ptr<llvm::Module> m = front_end(src, ctx);
        st.frontend_ms = ms_since(t0);
        m->setModuleIdentifier(key.hex());
        m->setTargetTriple(target.triple);
        m->setDataLayout(tm->createDataLayout());
        std::lock_guard lk(codegen_mu);
        t0 = Clock::now();
        optimize(*m);
        st.optimize_ms = ms_since(t0);
        return m;
    }

    cache::ArtifactInfo columns(const HostKernelSource& src, const cache::ContentKey& key, double ms_so_far) const {
        cache::ArtifactInfo info = src.columns;
        info.key = key;
        info.kind = cache::ArtifactKind::host_object;
        info.target = target.name();
        info.compiler = "llvm-" + std::string(LLVM_VERSION_STRING);
        if (info.kernel_name.empty() && !src.entries.empty()) info.kernel_name = fmt::format("{}", fmt::join(src.entries, ","));
        info.compile_ms = ms_so_far;
        return info;
    }

    // Links `obj` (or the IR module, compiled through the ObjectCache hook) into a fresh JITDylib
    // and resolves the entries.
    std::shared_ptr<HostKernelModule> link(const HostKernelSource& src, const cache::ContentKey& key,
                                           std::unique_ptr<llvm::MemoryBuffer> obj,
                                           llvm::orc::ThreadSafeModule tsm, HostCompileStats& st) {
        std::lock_guard lk(codegen_mu);
        ensure_jit();
        std::string jd_name = "kiln-" + key.hex();
        if (auto* old = jit->getExecutionSession().getJITDylibByName(jd_name))
            check(jit->getExecutionSession().removeJITDylib(*old), "removing a failed host module");
        auto& jd = check(jit->createJITDylib(jd_name), "creating a JITDylib");
        jd.addGenerator(check(llvm::orc::DynamicLibrarySearchGenerator::GetForCurrentProcess(
                                  jit->getDataLayout().getGlobalPrefix()),
                              "resolving process symbols"));
        auto fail = [&](const std::string& msg) -> HostCompileError {
            llvm::consumeError(jit->getExecutionSession().removeJITDylib(jd));
            bridge->pending.erase(key.hex());
            return HostCompileError(fmt::format("host kernel {}: {}", src.name, msg));
        };
        auto t0 = Clock::now();
        bool from_ir = static_cast<bool>(tsm);
        if (from_ir) {
            const double before_codegen = st.frontend_ms + st.optimize_ms;
            bridge->pending[key.hex()] =
                ObjectCacheBridge::Pending{columns(src, key, before_codegen), before_codegen, t0, 0, false, false};
            if (auto e = jit->addIRModule(jd, std::move(tsm))) throw fail(take_error(std::move(e)));
        } else {
            st.object_bytes = obj->getBufferSize();
            if (auto e = jit->addObjectFile(jd, std::move(obj))) throw fail(take_error(std::move(e)));
        }
        auto mod = std::make_shared<HostKernelModule>();
        mod->key_ = key;
        for (const auto& name : src.entries) {
            auto sym = jit->lookup(jd, name);
            if (!sym) throw fail(fmt::format("entry point '{}': {}", name, take_error(sym.takeError())));
#if LLVM_VERSION_MAJOR >= 15
            mod->entries_[name] = sym->template toPtr<void*>();
#else
            mod->entries_[name] = reinterpret_cast<void*>(static_cast<uintptr_t>(sym->getAddress()));
#endif
        }
        if (from_ir) {
            auto& p = bridge->pending[key.hex()];
            st.cache_hit = p.from_cache;
            st.object_bytes = p.object_bytes;
            st.codegen_ms = ms_since(t0);
            bridge->pending.erase(key.hex());
        }
        return mod;
    }

    std::shared_ptr<HostKernelModule> compile_and_load(const HostKernelSource& src, const cache::ContentKey& key) {
        auto t_start = Clock::now();
        HostCompileStats st;
        auto try_cache = [&]() -> std::shared_ptr<HostKernelModule> {
            if (!cache) return nullptr;
            auto t0 = Clock::now();
            auto blob = cache->load(key, target.name());
            if (!blob) return nullptr;
            auto buf = llvm::MemoryBuffer::getMemBufferCopy(
                llvm::StringRef(reinterpret_cast<const char*>(blob->data()), blob->size()), key.hex());
            auto mod = link(src, key, std::move(buf), llvm::orc::ThreadSafeModule(), st);
            st.cache_hit = true;
            st.load_ms = ms_since(t0);
            return mod;
        };
        std::shared_ptr<HostKernelModule> mod = try_cache();
        if (!mod) {
            std::shared_ptr<void> lease = cache ? cache->lease(key) : nullptr;
            mod = try_cache();  // another process may have built it while we waited
            if (!mod) {
                auto ctx = std::make_unique<llvm::LLVMContext>();
                auto m = make_ir(src, key, *ctx, st);
                mod = link(src, key, nullptr, llvm::orc::ThreadSafeModule(std::move(m), std::move(ctx)), st);
            }
        }
        st.total_ms = ms_since(t_start);
        mod->stats_ = st;
        log::debug("host kernel {} ({}): {}", src.name, key.hex(),
                   st.cache_hit ? fmt::format("loaded from cache in {:.2f} ms", st.load_ms)
                                : fmt::format("compiled in {:.1f} ms (clang {:.1f}, O3 {:.1f}, codegen {:.1f})",
                                              st.total_ms, st.frontend_ms, st.optimize_ms, st.codegen_ms));
        return mod;
    }
};

HostCompiler::HostCompiler(Options opts) : impl_(std::make_unique<Impl>()) {
    init_llvm_once();
    Impl& d = *impl_;
    d.target = opts.target ? *opts.target : HostTarget::detect();
    d.native = d.target.runs_on(HostTarget::detect());
    d.cache = opts.cache;
    d.tm = check(d.jtmb().createTargetMachine(), fmt::format("creating a TargetMachine for {}", d.target.name()));
    d.bridge = std::make_unique<ObjectCacheBridge>(d.cache, d.target.name());

    // cc1 options. Builtin-header paths are added per run (they are absolute and stay out of keys;
    // the LLVM version in the key stands for those headers).
    d.options = {"-triple", d.target.triple, "-target-cpu", d.target.cpu};
    for (const auto& f : d.target.features) d.options.insert(d.options.end(), {"-target-feature", f});
    d.options.insert(d.options.end(),
                     {"-x", "c++", "-std=c++17", "-O3", "-disable-llvm-passes", "-fno-rtti", "-ffp-contract=fast",
                      "-mrelocation-model", "pic", "-pic-level", "2", "-nostdsysteminc",
                      "-nostdinc++", "-I", k_virtual_root, "-Wall", "-Wno-unused-function"});
}

HostCompiler::~HostCompiler() = default;

const HostTarget& HostCompiler::target() const { return impl_->target; }
bool HostCompiler::native() const { return impl_->native; }
std::vector<std::string> HostCompiler::canonical_options() const { return impl_->options; }
uint64_t HostCompiler::clang_invocations() { return g_clang_invocations.load(); }
std::string HostCompiler::llvm_version() { return LLVM_VERSION_STRING; }

cache::ContentKey HostCompiler::key(const HostKernelSource& src) const {
    const Impl& d = *impl_;
    cache::KeyBuilder kb;
    kb.field("artifact", "host_object");
    kb.field("source", src.source);
    auto headers = src.headers;
    std::sort(headers.begin(), headers.end());
    for (const auto& [name, bytes] : headers) {
        kb.field("header-name", name);
        kb.field("header-bytes", bytes);
    }
    kb.field("options", fmt::format("{}", fmt::join(d.options, "\n")));
    kb.field("pipeline", k_pipeline);
    kb.field("compiler", "llvm-" + std::string(LLVM_VERSION_STRING));
    kb.field("triple", d.target.triple);
    kb.field("cpu", d.target.cpu);
    kb.field("features", d.target.feature_string());
    kb.field("abi", static_cast<int64_t>(KILN_HOST_ABI_VERSION));
    kb.field("entries", fmt::format("{}", fmt::join(src.entries, ",")));
    kb.field("target", d.target.name());
    return kb.finish();
}

std::shared_ptr<const HostKernelModule> HostCompiler::load(const HostKernelSource& src) {
    Impl& d = *impl_;
    if (!d.native)
        throw HostCompileError(fmt::format("host kernel {}: cannot load code for {} on this machine ({}); "
                                           "it can only be built into a cache",
                                           src.name, d.target.name(), HostTarget::detect().name()));
    if (src.entries.empty()) throw InvalidArgument(fmt::format("host kernel {}: no entry points listed", src.name));
    cache::ContentKey k = key(src);

    std::promise<std::shared_ptr<const HostKernelModule>> promise;
    {
        std::lock_guard lk(d.memo_mu);
        auto it = d.memo.find(k);
        if (it != d.memo.end()) {
            auto fut = it->second;
            auto mod = fut.get();  // waits for an in-flight compile; rethrows its error
            return mod;
        }
        d.memo.emplace(k, promise.get_future().share());
    }
    try {
        auto mod = d.compile_and_load(src, k);
        promise.set_value(mod);
        return mod;
    } catch (...) {
        promise.set_exception(std::current_exception());
        std::lock_guard lk(d.memo_mu);
        d.memo.erase(k);  // a later call may retry
        throw;
    }
}

HostCompileStats HostCompiler::build(const HostKernelSource& src) {
    Impl& d = *impl_;
    cache::ContentKey k = key(src);
    auto t_start = Clock::now();
    HostCompileStats st;
    auto cached = [&] {
        auto t0 = Clock::now();
        auto blob = d.cache ? d.cache->load(k, d.target.name()) : std::nullopt;
        if (!blob) return false;
        st.cache_hit = true;
        st.object_bytes = blob->size();
        st.load_ms = ms_since(t0);
        return true;
    };
    if (!cached()) {
        std::shared_ptr<void> lease = d.cache ? d.cache->lease(k) : nullptr;
        if (!cached()) {
            llvm::LLVMContext ctx;
            auto m = d.make_ir(src, k, ctx, st);
            std::lock_guard lk(d.codegen_mu);
            auto t0 = Clock::now();
            const double before_codegen = st.frontend_ms + st.optimize_ms;
            d.bridge->pending[k.hex()] =
                ObjectCacheBridge::Pending{d.columns(src, k, before_codegen), before_codegen, t0, 0, false, false};
            llvm::orc::SimpleCompiler compile(*d.tm, d.bridge.get());
            auto obj = compile(*m);
            auto p = d.bridge->pending[k.hex()];
            d.bridge->pending.erase(k.hex());
            if (!obj) throw HostCompileError(fmt::format("host kernel {}: codegen: {}", src.name, take_error(obj.takeError())));
            st.cache_hit = p.from_cache;
            st.object_bytes = (*obj)->getBufferSize();
            st.codegen_ms = ms_since(t0);
        }
    }
    st.total_ms = ms_since(t_start);
    return st;
}

}  // namespace kiln::jit
