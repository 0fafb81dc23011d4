// mallochist: a log2 histogram of the sizes malloc is asked for, and the
// number of calls per process.
//
//	clang -O2 -g -target bpf -D__TARGET_ARCH_x86 -I/usr/include/x86_64-linux-gnu -c mallochist.bpf.c
//	probeopt run mallochist.bpf.o -- CMD [ARGS]
//
// The same object runs on the kernel's uprobes (bpftool, libbpf or
// cilium/ebpf's link.Uprobe) unchanged.
#include <linux/bpf.h>
#include <linux/ptrace.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char LICENSE[] SEC("license") = "GPL";

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u64);
} sizes SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, __u64);
} calls SEC(".maps");

static __always_inline __u32 log2l(__u64 v)
{
	__u32 r = 0;
	if (v >> 32) { v >>= 32; r += 32; }
	if (v >> 16) { v >>= 16; r += 16; }
	if (v >> 8) { v >>= 8; r += 8; }
	if (v >> 4) { v >>= 4; r += 4; }
	if (v >> 2) { v >>= 2; r += 2; }
	if (v >> 1) { r += 1; }
	return r;
}

SEC("uprobe/libc.so.6:malloc")
int BPF_KPROBE(malloc_size, __u64 size)
{
	__u32 slot = log2l(size);
	__u64 *n = bpf_map_lookup_elem(&sizes, &slot);
	if (n)
		__sync_fetch_and_add(n, 1);
	// Threads of one process share its key: the first call of each may
	// find no entry at once, so each makes sure of a zero entry (only one
	// insert wins) and then adds to whichever entry is there.
	__u32 pid = bpf_get_current_pid_tgid() >> 32;
	__u64 zero = 0, *c = bpf_map_lookup_elem(&calls, &pid);
	if (!c) {
		bpf_map_update_elem(&calls, &pid, &zero, BPF_NOEXIST);
		c = bpf_map_lookup_elem(&calls, &pid);
	}
	if (c)
		__sync_fetch_and_add(c, 1);
	return 0;
}
