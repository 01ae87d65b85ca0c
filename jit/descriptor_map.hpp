// DescriptorMap: KernelDescriptor -> pointer, built for the dispatcher's hit path. Lookups are
// lock-free (one hash, atomic loads, one byte compare); inserts serialise on a mutex. Entries are
// never removed; a grown table replaces the old one for new readers while the old one stays alive
// for readers still inside it (total memory stays under twice the final table).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "jit/descriptor.hpp"

namespace kiln::jit {

template <typename T>
class DescriptorMap {
public:
    DescriptorMap() { table_.store(grow_to(16), std::memory_order_release); }
    DescriptorMap(const DescriptorMap&) = delete;
    DescriptorMap& operator=(const DescriptorMap&) = delete;

    // nullptr when absent.
    T* find(const KernelDescriptor& d) const noexcept {
        const uint64_t h = DescriptorHash{}(d);
        const Table* t = table_.load(std::memory_order_acquire);
        for (size_t i = h & t->mask;; i = (i + 1) & t->mask) {
            const Entry* e = t->slots[i].load(std::memory_order_acquire);
            if (e == nullptr) return nullptr;
            if (e->hash == h && e->key == d) return e->value;
        }
    }

    // Inserts d -> v unless d is present; returns the value now mapped.
    T* insert(const KernelDescriptor& d, T* v) {
        std::lock_guard<std::mutex> lock(write_mu_);
        if (T* existing = find(d)) return existing;
        const Table* t = table_.load(std::memory_order_relaxed);
        if ((count_ + 1) * 2 > t->mask + 1) {
            const Table* bigger = grow_to((t->mask + 1) * 2);
            for (const auto& e : entries_) place(*bigger, e.get());
            table_.store(bigger, std::memory_order_release);
            t = bigger;
        }
        entries_.push_back(std::make_unique<Entry>(Entry{DescriptorHash{}(d), d, v}));
        place(*t, entries_.back().get());
        ++count_;
        return v;
    }

    size_t size() const {
        std::lock_guard<std::mutex> lock(write_mu_);
        return count_;
    }

private:
    struct Entry {
        uint64_t hash;
        KernelDescriptor key;
        T* value;
    };
    struct Table {
        size_t mask;
        std::unique_ptr<std::atomic<const Entry*>[]> slots;
    };

    const Table* grow_to(size_t capacity) {
        auto t = std::make_unique<Table>();
        t->mask = capacity - 1;
        t->slots = std::make_unique<std::atomic<const Entry*>[]>(capacity);
        for (size_t i = 0; i < capacity; ++i) t->slots[i].store(nullptr, std::memory_order_relaxed);
        tables_.push_back(std::move(t));
        return tables_.back().get();
    }

    static void place(const Table& t, const Entry* e) {
        for (size_t i = e->hash & t.mask;; i = (i + 1) & t.mask) {
            if (t.slots[i].load(std::memory_order_relaxed) == nullptr) {
                t.slots[i].store(e, std::memory_order_release);
                return;
            }
        }
    }

    std::atomic<const Table*> table_{nullptr};
    mutable std::mutex write_mu_;
    std::vector<std::unique_ptr<Entry>> entries_;
    std::vector<std::unique_ptr<Table>> tables_;
    size_t count_ = 0;
};

}  // namespace kiln::jit
