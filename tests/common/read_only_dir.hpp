// Makes a directory really read-only for the kiln runs of a test, so that writes into it fail even
// for root (tests often run as root, and root ignores permission bits). Preferred: a read-only bind
// mount of the directory over itself, in a private mount namespace each run enters through the
// sandbox's launcher (`unshare -m`; needs CAP_SYS_ADMIN, nothing outside the run sees it). Else, for a
// user other than root, the permission bits (chmod a-w, restored afterwards). available() is false
// when neither works; the test should then say so and skip.
#pragma once

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "tests/common/cli_runner.hpp"

namespace kiln::test {

class ReadOnlyDir {
public:
    explicit ReadOnlyDir(const fs::path& dir) : dir_(dir) {
        const std::string q = shell_quote(dir.string());
        const std::string mount = "unshare -m sh -c 'mount --bind \"$1\" \"$1\" && mount -o remount,bind,ro \"$1\" && "
                                  "shift && exec \"$@\"' sh " + q;
        // The mount must work, and a file must then not be creatable there.
        const std::string works = mount + " true 2>/dev/null";
        const std::string probe = mount + " sh -c 'touch \"$1\"/.kiln-probe' sh " + q + " 2>/dev/null";
        if (std::system(works.c_str()) == 0 && std::system(probe.c_str()) != 0 && !fs::exists(dir / ".kiln-probe")) {
            launcher_ = mount;
            how_ = "a read-only bind mount";
            return;
        }
        std::error_code ec;
        fs::remove(dir / ".kiln-probe", ec);
        if (::geteuid() != 0) {
            for (const auto& e : fs::recursive_directory_iterator(dir)) chmod_away(e.path());
            chmod_away(dir);
            how_ = "permissions (chmod a-w)";
        }
    }
    ~ReadOnlyDir() {
        std::error_code ec;
        for (auto it = restore_.rbegin(); it != restore_.rend(); ++it) fs::permissions(it->first, it->second, ec);
    }
    ReadOnlyDir(const ReadOnlyDir&) = delete;
    ReadOnlyDir& operator=(const ReadOnlyDir&) = delete;

    bool available() const { return !how_.empty(); }
    const std::string& how() const { return how_; }
    // Prefix for Sandbox::launcher ("" when the permission bits do the work).
    const std::string& launcher() const { return launcher_; }

private:
    void chmod_away(const fs::path& p) {
        std::error_code ec;
        const fs::perms before = fs::status(p, ec).permissions();
        if (ec) return;
        restore_.emplace_back(p, before);
        fs::permissions(p, fs::perms::owner_write | fs::perms::group_write | fs::perms::others_write,
                        fs::perm_options::remove, ec);
    }

    fs::path dir_;
    std::string launcher_, how_;
    std::vector<std::pair<fs::path, fs::perms>> restore_;
};

}  // namespace kiln::test
