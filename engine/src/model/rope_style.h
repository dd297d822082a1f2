// Which elements of a head rotary position embedding pairs up, as the model
// family says: adjacent ones (2i, 2i+1) in ggml's "normal" style, (i, i +
// dims/2) in NEOX style. A fact of the model description; kernels/rope.h
// applies it.
#pragma once

namespace sipllm {

enum class RopeStyle { kNormal, kNeox };

}  // namespace sipllm
