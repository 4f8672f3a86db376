// Type tags of the classes the addon wraps (Event, Stream; device buffers are JS objects with
// an unforgeable handle instead, device/buffer_table.h). Every instance is tagged
// when it is constructed, and an argument is recognised by its tag: one private-property read,
// where an instanceof check walked the prototype chain and looked up Symbol.hasInstance on the
// constructor for every buffer of every op (a 64 x 64 matmul reads three). A tag also cannot be
// forged from JS, as a prototype can (Object.create(Buffer.prototype) passed instanceof).
#pragma once

#include <napi.h>

namespace ascent {

// Random 128-bit values, one per class; they only need to differ from each other and from
// other addons' tags.
inline constexpr napi_type_tag kEventTag = {0x3f9e27b8d5c1a604ULL, 0x8b4d0e6f1a2c7395ULL};
inline constexpr napi_type_tag kStreamTag = {0xd47a1b03e96f5c28ULL, 0x15f2c8a9b06e3d74ULL};

// Whether `v` is an object constructed with `tag`'s class (false for non-objects: the tag
// check of a primitive would box it, and of null or undefined would throw).
inline bool HasTypeTag(const Napi::Value& v, const napi_type_tag& tag) {
  return v.IsObject() && v.As<Napi::Object>().CheckTypeTag(&tag);
}

}  // namespace ascent
