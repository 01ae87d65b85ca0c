// The `kiln` executable (serving/cli/app.hpp).
#include "serving/cli/app.hpp"

int main(int argc, char** argv) { return kiln::cli::run(argc, argv); }
