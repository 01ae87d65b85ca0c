#include "tests/common/backends.hpp"

#include <cstdlib>
#include <filesystem>
#include <mutex>

#include "cache/store.hpp"
#include "runtime/cuda/driver.hpp"
#include "runtime/exec_target.hpp"

namespace kiln::test {

namespace {

namespace fs = std::filesystem;

struct Shared {
    fs::path dir;
    std::unique_ptr<cache::Store> store;
    std::unique_ptr<TestBackend> host, cuda;

    Shared() {
        std::string tmpl = (fs::temp_directory_path() / "kiln-test-cache-XXXXXX").string();
        if (mkdtemp(tmpl.data()) == nullptr) std::abort();
        dir = tmpl;
        cache::StoreOptions so;
        so.cache_dir = dir.string();
        store = std::make_unique<cache::Store>(so);
        if (runtime::host_target_available()) host = make(runtime::BackendKind::host);
        if (runtime::has_device()) cuda = make(runtime::BackendKind::cuda);
    }
    ~Shared() {
        host.reset();
        cuda.reset();
        store.reset();
        std::error_code ec;
        fs::remove_all(dir, ec);
    }
    std::unique_ptr<TestBackend> make(runtime::BackendKind kind) {
        auto t = std::make_unique<TestBackend>();
        t->name = runtime::to_string(kind);
        t->backend = runtime::make_backend(kind);
        jit::DispatcherOptions o;
        o.store = store.get();
        t->disp = std::make_unique<jit::Dispatcher>(o);
        t->stream = t->backend->create_stream();
        return t;
    }
};

Shared& shared() {
    static Shared s;
    return s;
}

}  // namespace

TestBackend* host_backend() { return shared().host.get(); }

TestBackend* cuda_backend() {
    TestBackend* t = shared().cuda.get();
    if (t) t->backend->make_current();
    return t;
}

std::vector<TestBackend*> available_backends(const std::string& only) {
    std::vector<TestBackend*> out;
    if (only.empty() || only == "host")
        if (TestBackend* h = host_backend()) out.push_back(h);
    if (only.empty() || only == "cuda")
        if (TestBackend* c = cuda_backend()) out.push_back(c);
    return out;
}

}  // namespace kiln::test
