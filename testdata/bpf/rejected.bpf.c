// A program the kernel's verifier refuses: it reads its stack at an
// index it does not bound.
#include <linux/bpf.h>
#include <linux/ptrace.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char LICENSE[] SEC("license") = "GPL";

SEC("uprobe")
int beyond(struct pt_regs *ctx)
{
	volatile char buf[8] = {};
	unsigned long i = PT_REGS_PARM1(ctx) & 0xff;
	return buf[i];
}
