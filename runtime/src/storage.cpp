#include "kiln/runtime/storage.h"

#include "kiln/runtime/error.h"

namespace kiln {

namespace {
thread_local size_t storage_limit = 0;  // 0: none (StorageLimit)
}  // namespace

size_t Storage::checked_size(size_t nbytes) {
  KILN_CHECK(storage_limit == 0 || nbytes <= storage_limit, "storage", "a tensor of ", nbytes,
             " bytes exceeds this thread's limit of ", storage_limit, " bytes");
  return nbytes;
}

StorageLimit::StorageLimit(size_t max_bytes) : previous_(storage_limit) {
  storage_limit = max_bytes;
}
StorageLimit::~StorageLimit() {
  storage_limit = previous_;
}

Storage::Storage(size_t nbytes)
    : data_(cpu_allocator().allocate(checked_size(nbytes))),
      nbytes_(nbytes),
      allocator_(&cpu_allocator()) {}

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
