// The end-to-end programs: attached by the kernel and by probeopt to
// the workload (workload.c), every map and ring record must agree.
#include <linux/bpf.h>
#include <linux/ptrace.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char LICENSE[] SEC("license") = "GPL";

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__type(key, __u64);
	__type(value, __u64);
} by_key SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u64);
} value_log2 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} entries SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __u64);
	__type(value, __u64);
} by_ret SEC(".maps");

// ret_ids counts the returns by the attachment's cookie (high bits) and
// the page offset of get_func_ip's address (low 12 bits).
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8);
	__type(key, __u64);
	__type(value, __u64);
} ret_ids SEC(".maps");

// by_ret_bad counts perf_event_output's errors (flags with context bits,
// an index beyond the CPUs).
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8);
	__type(key, __u64);
	__type(value, __u64);
} by_ret_bad SEC(".maps");

// stacks counts the user stacks (6 entries) of the calls with key 5.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __u64[6]);
	__type(value, __u64);
} stacks SEC(".maps");

// stack_rets counts get_stack's results by call (high half) and result
// (low half): a user stack skipping 2, a kernel stack, a skip without a
// user stack, a size not a multiple of 8.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16);
	__type(key, __u64);
	__type(value, __u64);
} stack_rets SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERF_EVENT_ARRAY);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(__u32));
} perf_records SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 16);
} records SEC(".maps");

struct record {
	__u64 key;
	__u64 value;
	__u64 sp_aligned; // the stack pointer at the entry is 8 modulo 16
	__u64 ip_page;    // the page offset of the instruction pointer (the probe address)
	__u64 func_ip_page; // the page offset of get_func_ip's address
	__u64 cookie;     // get_attach_cookie
};

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

// add counts a call under key. Threads may meet a new key at once: only
// one insert of a zero wins, and every call adds to the entry that is there.
static __always_inline void add(void *map, void *key)
{
	__u64 zero = 0, *v = bpf_map_lookup_elem(map, key);
	if (!v) {
		bpf_map_update_elem(map, key, &zero, BPF_NOEXIST);
		v = bpf_map_lookup_elem(map, key);
	}
	if (v)
		__sync_fetch_and_add(v, 1);
}

SEC("uprobe")
int BPF_KPROBE(on_work, __u64 key, __u64 value)
{
	__u32 zero = 0, slot = log2l(value);
	__u64 *n = bpf_map_lookup_elem(&entries, &zero);
	if (n)
		(*n)++;
	add(&by_key, &key);
	__u64 *h = bpf_map_lookup_elem(&value_log2, &slot);
	if (h)
		__sync_fetch_and_add(h, 1);
	if (key == 5) {
		__u64 st[6] = {};
		long n = bpf_get_stack(ctx, st, sizeof(st), BPF_F_USER_STACK);
		if (n > 0)
			add(&stacks, st);
		__u64 r[4], id;
		__u64 small[2] = {};
		r[0] = bpf_get_stack(ctx, small, sizeof(small), BPF_F_USER_STACK | 2);
		r[1] = bpf_get_stack(ctx, small, sizeof(small), 0);
		r[2] = bpf_get_stack(ctx, small, sizeof(small), 1);
		r[3] = bpf_get_stack(ctx, small, 12, BPF_F_USER_STACK);
		for (int i = 0; i < 4; i++) {
			id = (__u64)i << 32 | (__u32)r[i];
			add(&stack_rets, &id);
		}
	}
	if (key == 5 && value % 1000 == 25) {
		bpf_printk("key=%d value=%lu low=%x", key, value, (__u32)value);
		bpf_printk("%05u|%-4x|%c%%", (__u32)value % 1000, 171, 'z');
		struct record *r = bpf_ringbuf_reserve(&records, sizeof(*r), 0);
		if (r) {
			r->key = key;
			r->value = value;
			r->sp_aligned = (PT_REGS_SP(ctx) & 15) == 8;
			r->ip_page = PT_REGS_IP(ctx) & 0xfff;
			r->func_ip_page = bpf_get_func_ip(ctx) & 0xfff;
			r->cookie = bpf_get_attach_cookie(ctx);
			bpf_ringbuf_submit(r, 0);
		}
		// The same record as a perf sample, and a 5-byte one (padded).
		struct record p = {key, value, (PT_REGS_SP(ctx) & 15) == 8, PT_REGS_IP(ctx) & 0xfff,
				   bpf_get_func_ip(ctx) & 0xfff, bpf_get_attach_cookie(ctx)};
		bpf_perf_event_output(ctx, &perf_records, BPF_F_CURRENT_CPU, &p, sizeof(p));
		bpf_perf_event_output(ctx, &perf_records, BPF_F_CURRENT_CPU, &p, 5);
		__u64 bad = bpf_perf_event_output(ctx, &perf_records, 1ULL << 32 | BPF_F_CURRENT_CPU, &p, 8) << 8 |
			    (__u8)bpf_perf_event_output(ctx, &perf_records, 4096, &p, 8);
		add(&by_ret_bad, &bad);
	}
	return 0;
}

SEC("uretprobe")
int BPF_KRETPROBE(on_work_return, __u64 ret)
{
	add(&by_ret, &ret);
	__u64 id = bpf_get_attach_cookie(ctx) << 12 | (bpf_get_func_ip(ctx) & 0xfff);
	add(&ret_ids, &id);
	return 0;
}
