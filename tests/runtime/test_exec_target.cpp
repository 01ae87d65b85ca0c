#include <doctest/doctest.h>

#include <cstdlib>
#include <memory>
#include <string>

#include "kiln_config.h"
#include "runtime/cuda/driver.hpp"
#include "runtime/cuda/device.hpp"
#include "runtime/error.hpp"
#include "runtime/exec_target.hpp"

using namespace kiln;
using namespace kiln::runtime;

TEST_CASE("target preferences parse") {
    CHECK(parse_target_preference("host") == TargetPreference::host);
    CHECK(parse_target_preference("CUDA") == TargetPreference::cuda);
    CHECK(parse_target_preference("auto") == TargetPreference::auto_select);
    CHECK_THROWS_WITH_AS(parse_target_preference("gpu"), doctest::Contains("expected host, cuda or auto"),
                         InvalidArgument);
    CHECK(std::string(to_string(TargetPreference::auto_select)) == "auto");
    CHECK(std::string(to_string(ExecTarget::host)) == "host");
}

TEST_CASE("KILN_TARGET is read unless the CLI set a preference") {
    ::unsetenv("KILN_TARGET");
    CHECK(target_preference() == TargetPreference::auto_select);
    ::setenv("KILN_TARGET", "host", 1);
    CHECK(target_preference() == TargetPreference::host);
    ::setenv("KILN_TARGET", "tpu", 1);
    CHECK_THROWS_WITH_AS(target_preference(), doctest::Contains("KILN_TARGET=tpu"), InvalidArgument);
    set_target_preference(TargetPreference::cuda);  // the CLI's --target wins
    CHECK(target_preference() == TargetPreference::cuda);
    ::unsetenv("KILN_TARGET");
}

TEST_CASE("resolving a preference follows the machine and the build") {
    const bool gpu = device_count() > 0;
    std::string why;
    if (host_target_available()) {
        CHECK(resolve_exec_target(TargetPreference::host, &why) == ExecTarget::host);
        CHECK(why == "host: requested");
    } else {
        CHECK_THROWS_WITH_AS(resolve_exec_target(TargetPreference::host), doctest::Contains("without the host JIT"),
                             InvalidArgument);
    }
    CHECK(host_target_available() == (KILN_HAVE_HOST_JIT != 0));
    if (gpu) {
        CHECK(resolve_exec_target(TargetPreference::cuda) == ExecTarget::cuda);
        CHECK(resolve_exec_target(TargetPreference::auto_select, &why) == ExecTarget::cuda);
        CHECK(why == "auto: CUDA device found");
    } else {
        CHECK_THROWS_WITH_AS(resolve_exec_target(TargetPreference::cuda), doctest::Contains("no CUDA device"), NoDevice);
        if (host_target_available()) {
            CHECK(resolve_exec_target(TargetPreference::auto_select, &why) == ExecTarget::host);
            CHECK(why == "auto: no CUDA device");
        } else {
            CHECK_THROWS_AS(resolve_exec_target(TargetPreference::auto_select), NoDevice);
        }
    }
}

TEST_CASE("make_backend gives the target's backend") {
    if (host_target_available()) {
        std::unique_ptr<Backend> h = make_backend(ExecTarget::host);
        CHECK(h->kind() == BackendKind::host);
        CHECK(h->location() == Location::host);
        CHECK(h->compute_units() >= 1);
        CHECK(h->name().rfind("host (", 0) == 0);
    }
    if (device_count() > 0) {
        std::unique_ptr<Backend> c = make_backend(ExecTarget::cuda);
        CHECK(c->kind() == BackendKind::cuda);
        CHECK(c->location() == Location::device);
        CHECK(c->compute_units() == device_props(0).sm_count);
        CHECK(c->name().rfind("cuda:0 ", 0) == 0);
    } else {
        CHECK_THROWS_AS(make_backend(ExecTarget::cuda), NoDevice);
    }
    CHECK(std::string(to_string(BackendKind::cuda)) == "cuda");
}
