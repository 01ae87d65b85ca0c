// doctest entry point for the 'gpu' suite: exits 77 (meson: skipped) when there is no CUDA device.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>

#include "runtime/cuda/driver.hpp"

int main(int argc, char** argv) {
    const kiln::runtime::DriverStatus& s = kiln::runtime::driver_status();
    if (!s.ready()) {
        std::fprintf(stderr, "skipped: %s\n", s.reason.c_str());
        return 77;
    }
    doctest::Context ctx(argc, argv);
    return ctx.run();
}
