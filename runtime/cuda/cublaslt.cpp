#include "runtime/cuda/cublaslt.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <filesystem>
#include <vector>

#include <fmt/format.h>

#include "runtime/cuda/backend.hpp"
#include "runtime/cuda/stream.hpp"
#include "runtime/env.hpp"
#include "runtime/log.hpp"

// kiln declares the few cuBLASLt types it uses itself (the library is optional at build time too); where the
// real header is present, the declarations are checked against it.
#if __has_include(<cublasLt.h>)
#include <cublasLt.h>
#define KILN_HAVE_CUBLASLT_HEADER 1
#endif

namespace kiln::runtime {

namespace {

namespace lt {
using Handle = void*;
using Desc = void*;
using Layout = void*;
using Pref = void*;
struct Algo {
    uint64_t data[8];
};
struct HeuristicResult {
    Algo algo;
    size_t workspace_size;
    int state;
    float waves;
    int reserved[4];
};
// Enum values of cublas_api.h, cublasLt.h and library_types.h.
constexpr int k_success = 0;
constexpr int k_op_n = 0, k_op_t = 1;
constexpr int k_compute_32f = 68;
constexpr int k_r_32f = 0, k_r_16bf = 14;
constexpr int k_desc_transa = 3, k_desc_transb = 4;
constexpr int k_pref_max_workspace = 1;

using Create = int (*)(Handle*);
using Destroy = int (*)(Handle);
using GetVersion = size_t (*)();
using DescCreate = int (*)(Desc*, int, int);
using DescDestroy = int (*)(Desc);
using DescSet = int (*)(Desc, int, const void*, size_t);
using LayoutCreate = int (*)(Layout*, int, uint64_t, uint64_t, int64_t);
using LayoutDestroy = int (*)(Layout);
using PrefCreate = int (*)(Pref*);
using PrefDestroy = int (*)(Pref);
using PrefSet = int (*)(Pref, int, const void*, size_t);
using Heuristic = int (*)(Handle, Desc, Layout, Layout, Layout, Layout, Pref, int, HeuristicResult*, int*);
using Matmul = int (*)(Handle, Desc, const void*, const void*, Layout, const void*, Layout, const void*, const void*,
                       Layout, void*, Layout, const Algo*, void*, size_t, CUstream);
}  // namespace lt

#ifdef KILN_HAVE_CUBLASLT_HEADER
static_assert(sizeof(lt::Algo) == sizeof(cublasLtMatmulAlgo_t));
static_assert(sizeof(lt::HeuristicResult) == sizeof(cublasLtMatmulHeuristicResult_t));
static_assert(offsetof(lt::HeuristicResult, workspace_size) == offsetof(cublasLtMatmulHeuristicResult_t, workspaceSize));
static_assert(offsetof(lt::HeuristicResult, state) == offsetof(cublasLtMatmulHeuristicResult_t, state));
static_assert(lt::k_op_t == CUBLAS_OP_T && lt::k_op_n == CUBLAS_OP_N && lt::k_compute_32f == CUBLAS_COMPUTE_32F);
static_assert(lt::k_r_32f == CUDA_R_32F && lt::k_r_16bf == CUDA_R_16BF);
static_assert(lt::k_desc_transa == CUBLASLT_MATMUL_DESC_TRANSA && lt::k_desc_transb == CUBLASLT_MATMUL_DESC_TRANSB);
static_assert(lt::k_pref_max_workspace == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES);
#endif

struct Api {
    lt::Create create = nullptr;
    lt::Destroy destroy = nullptr;
    lt::GetVersion version = nullptr;
    lt::DescCreate desc_create = nullptr;
    lt::DescDestroy desc_destroy = nullptr;
    lt::DescSet desc_set = nullptr;
    lt::LayoutCreate layout_create = nullptr;
    lt::LayoutDestroy layout_destroy = nullptr;
    lt::PrefCreate pref_create = nullptr;
    lt::PrefDestroy pref_destroy = nullptr;
    lt::PrefSet pref_set = nullptr;
    lt::Heuristic heuristic = nullptr;
    lt::Matmul matmul = nullptr;
};

struct Loaded {
    CublasLtStatus status;
    Api api;
};

namespace fs = std::filesystem;

std::vector<fs::path> wheel_dirs() {
    std::vector<fs::path> venvs;
    if (auto v = env::get("VIRTUAL_ENV")) venvs.emplace_back(*v);
    std::error_code ec;
    fs::path dir = fs::read_symlink("/proc/self/exe", ec).parent_path();
    for (int up = 0; !ec && up < 5 && !dir.empty(); ++up) {
        venvs.push_back(dir / ".venv");
        if (dir == dir.parent_path()) break;
        dir = dir.parent_path();
    }
    std::vector<fs::path> out;
    for (const fs::path& v : venvs) {
        if (!fs::is_directory(v / "lib", ec)) continue;
        std::vector<fs::path> found;
        for (const auto& e : fs::directory_iterator(v / "lib", ec))
            if (e.path().filename().string().rfind("python3", 0) == 0) found.push_back(e.path() / "site-packages");
        std::sort(found.begin(), found.end());
        out.insert(out.end(), found.begin(), found.end());
    }
    return out;
}

template <typename Fn>
bool resolve(void* h, const char* name, Fn& out, std::string& missing) {
    out = reinterpret_cast<Fn>(dlsym(h, name));
    if (out) return true;
    missing += fmt::format("{}{}", missing.empty() ? "" : ", ", name);
    return false;
}

Loaded load() {
    Loaded L;
    CublasLtStatus& s = L.status;
    const auto forced = env::get("KILN_CUBLASLT");
    if (forced && *forced == "none") {
        s.reason = "cuBLASLt disabled by KILN_CUBLASLT=none";
        return L;
    }
    std::vector<std::string> candidates = forced ? std::vector<std::string>{*forced} : cublaslt_library_candidates();
    void* h = nullptr;
    std::string errors;
    for (const std::string& c : candidates) {
        h = dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL);
        if (h) {
            s.library = c;
            break;
        }
        if (c.find('/') == std::string::npos) {  // the loader's own message for the bare sonames
            const char* e = dlerror();
            errors += fmt::format("; {}", e ? e : c);
        }
    }
    if (!h) {
        s.reason = fmt::format("cuBLASLt not found (tried {} places: {}, ...{}); set KILN_CUBLASLT to the library, or "
                               "install NVIDIA's nvidia-cublas wheel",
                               candidates.size(), candidates.empty() ? "" : candidates.front(), errors);
        return L;
    }
    Api& a = L.api;
    std::string missing;
    resolve(h, "cublasLtCreate", a.create, missing);
    resolve(h, "cublasLtDestroy", a.destroy, missing);
    resolve(h, "cublasLtGetVersion", a.version, missing);
    resolve(h, "cublasLtMatmulDescCreate", a.desc_create, missing);
    resolve(h, "cublasLtMatmulDescDestroy", a.desc_destroy, missing);
    resolve(h, "cublasLtMatmulDescSetAttribute", a.desc_set, missing);
    resolve(h, "cublasLtMatrixLayoutCreate", a.layout_create, missing);
    resolve(h, "cublasLtMatrixLayoutDestroy", a.layout_destroy, missing);
    resolve(h, "cublasLtMatmulPreferenceCreate", a.pref_create, missing);
    resolve(h, "cublasLtMatmulPreferenceDestroy", a.pref_destroy, missing);
    resolve(h, "cublasLtMatmulPreferenceSetAttribute", a.pref_set, missing);
    resolve(h, "cublasLtMatmulAlgoGetHeuristic", a.heuristic, missing);
    resolve(h, "cublasLtMatmul", a.matmul, missing);
    if (!missing.empty()) {
        s.reason = fmt::format("cuBLASLt {} lacks entry points: {}", s.library, missing);
        return L;
    }
    s.version = a.version();
    s.ready = true;
    return L;
}

const Loaded& loaded() {
    static const Loaded L = [] {
        Loaded l = load();
        if (!l.status.ready) log::debug("{}", l.status.reason);
        return l;
    }();
    return L;
}

const Api& api() {
    const Loaded& L = loaded();
    if (!L.status.ready) throw CublasLtUnavailable(L.status.reason);
    return L.api;
}

void check(int status, const char* call) {
    if (status != lt::k_success) throw CublasLtError(call, status);
}

}  // namespace

CublasLtError::CublasLtError(std::string call, int status)
    : Error(fmt::format("{} failed: cublasStatus_t {}", call, status)), status_(status) {}

std::vector<std::string> cublaslt_library_candidates() {
    std::vector<std::string> out;
    std::vector<std::string> roots;
    for (const char* var : {"KILN_CUDA_HOME", "CUDA_HOME"})
        if (auto v = env::get(var)) roots.push_back(*v);
    roots.emplace_back("/usr/local/cuda");
    for (const char* so : {"libcublasLt.so.13", "libcublasLt.so.12"}) {
        for (const std::string& r : roots)
            for (const char* lib : {"lib64", "lib"}) out.push_back((fs::path(r) / lib / so).string());
        out.emplace_back(so);
    }
    for (const fs::path& sp : wheel_dirs()) {
        out.push_back((sp / "nvidia" / "cu13" / "lib" / "libcublasLt.so.13").string());
        out.push_back((sp / "nvidia" / "cublas" / "lib" / "libcublasLt.so.12").string());
    }
    std::vector<std::string> uniq;
    for (auto& c : out)
        if (std::find(uniq.begin(), uniq.end(), c) == uniq.end()) uniq.push_back(c);
    return uniq;
}

const CublasLtStatus& cublaslt_status() { return loaded().status; }

struct CublasLt::Plan {
    lt::Desc desc = nullptr;
    lt::Layout a = nullptr, b = nullptr, d = nullptr;
    lt::Algo algo{};
    ~Plan() {
        const Api& f = loaded().api;
        for (lt::Layout l : {a, b, d})
            if (l) f.layout_destroy(l);
        if (desc) f.desc_destroy(desc);
    }
};

CublasLt::CublasLt(CudaBackend& backend, size_t workspace_bytes) : backend_(backend) {
    const Api& f = api();
    backend_.make_current();
    check(f.create(&handle_), "cublasLtCreate");
    if (workspace_bytes) workspace_ = backend_.alloc(workspace_bytes);
}

CublasLt::~CublasLt() {
    plans_.clear();
    if (handle_) loaded().api.destroy(handle_);
}

size_t CublasLt::cached_plans() const {
    std::lock_guard lock(mu_);
    return plans_.size();
}

const CublasLt::Plan& CublasLt::plan(DType y_dtype, int64_t m, int64_t n, int64_t k) {
    std::lock_guard lock(mu_);
    auto key = std::make_tuple(static_cast<int>(y_dtype), m, n, k);
    if (auto it = plans_.find(key); it != plans_.end()) return *it->second;
    const Api& f = api();
    auto p = std::make_unique<Plan>();
    // Column-major view of the row-major problem: yᵀ[N, M] = W[N, K] · xᵀ[K, M], W read transposed from its
    // row-major [N, K] storage (a K x N column-major matrix).
    check(f.desc_create(&p->desc, lt::k_compute_32f, lt::k_r_32f), "cublasLtMatmulDescCreate");
    const int32_t ta = lt::k_op_t, tb = lt::k_op_n;
    check(f.desc_set(p->desc, lt::k_desc_transa, &ta, sizeof ta), "cublasLtMatmulDescSetAttribute(TRANSA)");
    check(f.desc_set(p->desc, lt::k_desc_transb, &tb, sizeof tb), "cublasLtMatmulDescSetAttribute(TRANSB)");
    check(f.layout_create(&p->a, lt::k_r_16bf, uint64_t(k), uint64_t(n), k), "cublasLtMatrixLayoutCreate(W)");
    check(f.layout_create(&p->b, lt::k_r_16bf, uint64_t(k), uint64_t(m), k), "cublasLtMatrixLayoutCreate(x)");
    check(f.layout_create(&p->d, y_dtype == DType::f32 ? lt::k_r_32f : lt::k_r_16bf, uint64_t(n), uint64_t(m), n),
          "cublasLtMatrixLayoutCreate(y)");
    lt::Pref pref = nullptr;
    check(f.pref_create(&pref), "cublasLtMatmulPreferenceCreate");
    const uint64_t ws = workspace_.size();
    int status = f.pref_set(pref, lt::k_pref_max_workspace, &ws, sizeof ws);
    lt::HeuristicResult r{};
    int found = 0;
    if (status == lt::k_success) status = f.heuristic(handle_, p->desc, p->a, p->b, p->d, p->d, pref, 1, &r, &found);
    f.pref_destroy(pref);
    check(status, "cublasLtMatmulAlgoGetHeuristic");
    if (found < 1 || r.state != lt::k_success)
        throw CublasLtError(fmt::format("cublasLtMatmulAlgoGetHeuristic (no algorithm for [{}, {}] x [{}, {}]^T)", m, k, n, k),
                            r.state);
    p->algo = r.algo;
    return *plans_.emplace(key, std::move(p)).first->second;
}

bool CublasLt::prepare(DType y_dtype, int64_t m, int64_t n, int64_t k) {
    if ((y_dtype != DType::bf16 && y_dtype != DType::f32) || m <= 0 || n <= 0 || k <= 0) return false;
    try {
        plan(y_dtype, m, n, k);
        return true;
    } catch (const CublasLtError& e) {
        log::debug("cuBLASLt: {}", e.what());
        return false;
    }
}

void CublasLt::linear(Stream& stream, uint64_t x, uint64_t w, uint64_t y, DType y_dtype, int64_t m, int64_t n,
                      int64_t k) {
    auto* cs = dynamic_cast<CudaStream*>(&stream);
    if (cs == nullptr || &cs->backend() != static_cast<Backend*>(&backend_))
        throw InvalidArgument("cublaslt linear: the stream is not a stream of this CUDA backend");
    if (y_dtype != DType::bf16 && y_dtype != DType::f32)
        throw InvalidArgument(fmt::format("cublaslt linear: output {} (bf16 or f32)", to_string(y_dtype)));
    if (m <= 0 || n <= 0 || k <= 0) throw InvalidArgument(fmt::format("cublaslt linear: empty [{}, {}, {}]", m, n, k));
    const Plan& p = plan(y_dtype, m, n, k);
    const float alpha = 1.0f, beta = 0.0f;
    check(loaded().api.matmul(handle_, p.desc, &alpha, reinterpret_cast<const void*>(w), p.a,
                              reinterpret_cast<const void*>(x), p.b, &beta, reinterpret_cast<const void*>(y), p.d,
                              reinterpret_cast<void*>(y), p.d, &p.algo, workspace_.data(), workspace_.size(), cs->handle()),
          "cublasLtMatmul");
}

}  // namespace kiln::runtime
