// Linked when the build has no CUDA backend.
#include "device/device.h"

namespace minfer::device {

Probe probe_cuda() { return Probe{false, 0, "built without CUDA"}; }

}  // namespace minfer::device
