#include "runtime/backend.hpp"

#include <fmt/format.h>

#include "runtime/error.hpp"

namespace kiln::runtime {

const char* to_string(BackendKind k) { return k == BackendKind::cuda ? "cuda" : "host"; }

Buffer& Buffer::operator=(Buffer&& o) noexcept {
    if (this != &o) {
        reset();
        owner_ = o.owner_;
        addr_ = o.addr_;
        size_ = o.size_;
        o.release();
    }
    return *this;
}

void Buffer::reset() {
    if (owner_ != nullptr && addr_ != 0) owner_->free(addr_, size_);
    release();
}

TensorView Buffer::view(DType dtype, std::initializer_list<int64_t> shape) const {
    const Location loc = owner_ ? owner_->location() : Location::host;
    TensorView v = TensorView::contiguous(data(), dtype, shape, loc, 0);
    if (v.bytes() > size_)
        throw InvalidArgument(fmt::format("tensor {} needs {} bytes but the buffer holds {}", v.describe(), v.bytes(), size_));
    return v;
}

BackendKind Stream::kind() const { return backend().kind(); }

Buffer upload_buffer(Backend& b, const void* src, size_t n) {
    Buffer buf = b.alloc(n);
    if (n) b.upload(buf.addr(), src, n);
    return buf;
}

}  // namespace kiln::runtime
