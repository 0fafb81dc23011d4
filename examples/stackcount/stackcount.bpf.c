// stackcount: how often each user stack calls a function (up to 8
// frames, by the frame pointers; the program must be built with them).
//
//	clang -O2 -g -target bpf -D__TARGET_ARCH_x86 -I/usr/include/x86_64-linux-gnu -c stackcount.bpf.c
//	probeopt run --attach count=FUNC stackcount.bpf.o -- CMD [ARGS]
//
// The keys are the stacks' addresses; the same object runs on the
// kernel's uprobes unchanged.
#include <linux/bpf.h>
#include <linux/ptrace.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char LICENSE[] SEC("license") = "GPL";

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64[8]);
	__type(value, __u64);
} stacks SEC(".maps");

SEC("uprobe")
int count(struct pt_regs *ctx)
{
	__u64 st[8] = {};
	if (bpf_get_stack(ctx, st, sizeof(st), BPF_F_USER_STACK) <= 0)
		return 0;
	// Threads may meet a new stack at once: only one insert wins, and
	// every call adds to the entry that is there.
	__u64 zero = 0, *n = bpf_map_lookup_elem(&stacks, st);
	if (!n) {
		bpf_map_update_elem(&stacks, st, &zero, BPF_NOEXIST);
		n = bpf_map_lookup_elem(&stacks, st);
	}
	if (n)
		__sync_fetch_and_add(n, 1);
	return 0;
}
