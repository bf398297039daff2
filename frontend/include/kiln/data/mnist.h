#pragma once
// IDX files (the MNIST / Fashion-MNIST format), plain or gzip-compressed, and the MNIST dataset.
// Every header field is checked (magic, type code, rank, dims, size against the file's length);
// a corrupt or truncated file raises kiln::Error naming the file and the problem.

#include <string>

#include "kiln/data/dataset.h"

namespace kiln::data {

// Any IDX file: type code 0x08 -> uint8, 0x09 -> int8, 0x0B/0x0C -> int32 (int16 widened),
// 0x0D -> float32, 0x0E -> float64. Shape as in the header. `.gz` files (or any file starting
// with the gzip magic) are decompressed on the fly.
Tensor read_idx(const std::string& path);

// MNIST images: an idx3 ubyte file -> float32 [N, 1, rows, cols] scaled to [0, 1].
Tensor read_mnist_images(const std::string& path);
// MNIST labels: an idx1 ubyte file -> int64 [N]; every label must be < num_classes.
Tensor read_mnist_labels(const std::string& path, int64_t num_classes = 10);

// torch::data::datasets::MNIST: reads {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz] from
// `root` (Fashion-MNIST uses the same names). Examples: float32 [1, 28, 28], int64 label.
class MNIST : public Dataset {
 public:
  enum class Mode { kTrain, kTest };
  explicit MNIST(const std::string& root, Mode mode = Mode::kTrain);
  int64_t size() const override;
  Example get(int64_t index) const override;
  Example get_batch(std::span<const int64_t> indices) const override;
  const Tensor& images() const { return images_; }
  const Tensor& targets() const { return targets_; }
  bool is_train() const { return train_; }

 private:
  Tensor images_, targets_;
  bool train_;
};

}  // namespace kiln::data
