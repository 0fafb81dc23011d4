// latency: the time each thread spends in a function, from its entry and
// return: per thread, the calls, the total nanoseconds and a log2
// histogram of the calls' latencies. Attach both programs to the
// function:
//
//	clang -O2 -g -target bpf -D__TARGET_ARCH_x86 -I/usr/include/x86_64-linux-gnu -c latency.bpf.c
//	probeopt run --attach enter=FUNC --attach leave=FUNC latency.bpf.o -- CMD [ARGS]
//
// The same object runs on the kernel's uprobe and uretprobe unchanged.
#include <linux/bpf.h>
#include <linux/ptrace.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char LICENSE[] SEC("license") = "GPL";

// start holds the entry time of each thread's call in flight.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64);
	__type(value, __u64);
} start SEC(".maps");

struct stats {
	__u64 calls;
	__u64 total_ns;
	__u64 log2_ns[32];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct stats);
} by_thread SEC(".maps");

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

SEC("uprobe")
int enter(struct pt_regs *ctx)
{
	__u64 id = bpf_get_current_pid_tgid(), t = bpf_ktime_get_ns();
	bpf_map_update_elem(&start, &id, &t, BPF_ANY);
	return 0;
}

SEC("uretprobe")
int leave(struct pt_regs *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u64 *t0 = bpf_map_lookup_elem(&start, &id);
	if (!t0)
		return 0;
	__u64 d = bpf_ktime_get_ns() - *t0;
	bpf_map_delete_elem(&start, &id);
	__u32 tid = (__u32)id;
	struct stats *s = bpf_map_lookup_elem(&by_thread, &tid);
	if (!s) {
		struct stats zero = {};
		bpf_map_update_elem(&by_thread, &tid, &zero, BPF_NOEXIST);
		s = bpf_map_lookup_elem(&by_thread, &tid);
		if (!s)
			return 0;
	}
	s->calls++;
	s->total_ns += d;
	__u32 slot = log2l(d);
	if (slot < 32)
		s->log2_ns[slot]++;
	return 0;
}
