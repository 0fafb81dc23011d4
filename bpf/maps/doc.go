// Package maps holds eBPF maps in plain memory that the tracer and the
// process running JIT-compiled programs (package bpf/jit) share: an Arena
// is one memory region mapped in both, and each Map is a descriptor and
// its data inside it, laid out so that the JIT's machine code finds them
// by address.
//
// The map types are array, per-CPU array (per-thread stripes), hash, LRU
// hash, per-CPU hash (per-thread stripes of each entry's value), ring
// buffer and perf event array (one ring of raw samples for every thread,
// read with the same Reader); New refuses the others (stack traces ...)
// with ErrUnsupported.
//
// It owns the memory layout of each map type and the tracer's side of the
// maps: Lookup, Update, Delete and Iterate with the kernel's flags and
// errors, and a Reader of ring buffers, in the style of cilium/ebpf's
// ebpf.Map and ringbuf.Reader. It does not generate code (the JIT's map
// helpers implement the same layout in machine code) and does not map the
// arena into another process.
//
// # Layout
//
// Every address below is one in the executing process: the arena's Base.
// A descriptor is 64 bytes, 64-byte aligned:
//
//	+0  type         uint32 (the kernel's map type number)
//	+4  key size     uint32 (bytes)
//	+8  value size   uint32 (bytes)
//	+12 max entries  uint32
//	+16 stride       uint32 (bytes from one value, or hash entry, to the next)
//	+20 stripes      uint32 (per-thread copies of a per-CPU map; 1 otherwise)
//	+24 data         uint64 (address of the values, entries or ring)
//	+32 lock         uint32 (hash: a spin lock, 0 free, 1 held)
//	+36 count        uint32 (hash: entries in use)
//	+40 mask         uint32 (hash: slots-1; ring buffer: bytes-1)
//	+48 stamp        uint64 (hash: the use counter)
//	+56 stripe size  uint64 (per-CPU array: bytes from one stripe to the next)
//
// An array's value i is at data + i*stride, the stride being the value size
// rounded up to 8. A per-CPU array has Stripes copies of the whole array,
// each on cache lines of its own: stripe s's value i is at data +
// s*stripe_size + i*stride, stripe_size being max_entries*stride rounded
// up to 64 (the descriptor's word at +56).
//
// # Per-thread stripes
//
// A per-CPU map (percpu_array, percpu_hash) is per-thread: the code that calls a
// JIT-compiled program passes the calling thread's stripe number (see
// package bpf/jit), a number in [0, Stripes) that no other live thread
// holds at the same time. Only that thread writes its stripe, so a program
// updating its own copy never loses or tears an update, and no cache line
// of a per-CPU array is written by two threads (a per-CPU hash's stripes
// of one entry's value are adjacent: two threads updating the same key
// write the same line, each its own words). The tracer reads every stripe while the
// program runs: each aligned 8-byte word is read whole, so a value of one
// word is never torn, and a value of several words can be seen mid-update,
// as with the kernel's per-CPU maps read from user space. Lookup of a
// per-CPU map returns one value per stripe.
package maps
