#pragma once

namespace kiln {
// "MAJOR.MINOR.PATCH"
const char* version();
}  // namespace kiln
