// The CPU stand-in for a GPU ("sim"): device memory that the host cannot address and kernels that
// run in stream order when the host synchronises.
//
// Device addresses lie in a reserved range mapped with no access, so a host dereference of a
// device pointer is a segmentation fault at the faulty line. Each address has a twin in a second,
// readable mapping at the same offset, which only the queued kernels use (real()). Kernels and
// copies are queued and run, in order, at synchronize(): a host read of a copy's destination
// before synchronising sees the poison that the copy left there (all bits set: NaN for floats).
// Fresh allocations are poisoned the same way, so a read of memory never written shows.
#pragma once
#include <cstddef>
#include <functional>

namespace pn::sim {

void* alloc(size_t bytes);
void free(void* p);  // queued: kernels queued before it may still use the memory
bool owns(const void* p);
// The most memory held at once since the start or the last reset_peak() (a free counts when the
// queue runs it, as on a GPU's stream).
size_t peak_bytes();
void reset_peak();
// The readable twin of a device address (null stays null; host addresses are returned as they
// are, so kernels may take host pointers where the real device could, e.g. pinned memory).
void* real_address(const void* p);
template <class P>
P* real(P* p) {
  return static_cast<P*>(real_address(p));
}
void enqueue(std::function<void()> work);
void synchronize();  // runs the queue in order
size_t queued();     // tasks waiting (tests)

}  // namespace pn::sim
