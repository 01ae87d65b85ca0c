// Single flight: concurrent run(key, fn) calls for the same key execute fn once; the other callers
// block and receive the same result (or the same exception). Once a flight lands, the next run() for
// that key starts a new one, so callers memoise results themselves (the dispatcher's map, the store).
#pragma once

#include <functional>
#include <future>
#include <mutex>
#include <unordered_map>
#include <utility>

namespace kiln::jit {

template <typename Key, typename Value, typename Hash = std::hash<Key>>
class SingleFlight {
public:
    // Returns fn()'s value; `leader` (if given) is set to true for the caller that ran fn.
    template <typename Fn>
    Value run(const Key& key, Fn&& fn, bool* leader = nullptr) {
        std::unique_lock<std::mutex> lock(mu_);
        if (auto it = flights_.find(key); it != flights_.end()) {
            std::shared_future<Value> f = it->second;
            lock.unlock();
            if (leader) *leader = false;
            return f.get();
        }
        std::promise<Value> promise;
        flights_.emplace(key, promise.get_future().share());
        lock.unlock();
        if (leader) *leader = true;
        try {
            Value v = fn();
            promise.set_value(v);
            finish(key);
            return v;
        } catch (...) {
            promise.set_exception(std::current_exception());
            finish(key);
            throw;
        }
    }

    size_t in_flight() const {
        std::lock_guard<std::mutex> lock(mu_);
        return flights_.size();
    }

private:
    void finish(const Key& key) {
        std::lock_guard<std::mutex> lock(mu_);
        flights_.erase(key);
    }

    mutable std::mutex mu_;
    std::unordered_map<Key, std::shared_future<Value>, Hash> flights_;
};

}  // namespace kiln::jit
