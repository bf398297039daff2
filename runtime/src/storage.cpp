#include "kiln/runtime/storage.h"

namespace kiln {

Storage::Storage(size_t nbytes)
    : data_(cpu_allocator().allocate(nbytes)), nbytes_(nbytes), allocator_(&cpu_allocator()) {}

Storage::Storage(void* data, size_t nbytes, std::function<void(void*)> deleter)
    : data_(data), nbytes_(nbytes), deleter_(std::move(deleter)) {}

Storage::~Storage() {
  if (allocator_) {
    allocator_->deallocate(data_, nbytes_);
  } else if (deleter_) {
    deleter_(data_);
  }
}

}  // namespace kiln
