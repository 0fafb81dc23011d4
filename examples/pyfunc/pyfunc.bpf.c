// pyfunc: the calls of Python functions per (file, function), from
// CPython's USDT probe python:function__entry (its arguments: the code's
// file name, the function's name and the line number), read with libbpf's
// usdt.bpf.h. Attach the program to the probe of the python3 binary (or
// of libpython, where the interpreter lives there):
//
//	clang -O2 -g -target bpf -D__TARGET_ARCH_x86 -I/usr/include/x86_64-linux-gnu -c pyfunc.bpf.c
//	probeopt run --attach entry=usdt:python:function__entry pyfunc.bpf.o -- python3 script.py
//
// The same object runs unchanged under libbpf's own loader
// (bpf_program__attach_usdt), which sets the probe's semaphore as
// probeopt does.
#include <stdbool.h>
#include <linux/bpf.h>
#include <linux/ptrace.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/usdt.bpf.h>

char LICENSE[] SEC("license") = "GPL";

struct call {
	char file[64];
	char func[64];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 10240);
	__type(key, struct call);
	__type(value, __u64);
} calls SEC(".maps");

SEC("usdt")
int BPF_USDT(entry, const char *file, const char *func, int line)
{
	struct call c = {};
	__u64 zero = 0, *n;

	bpf_probe_read_user_str(c.file, sizeof(c.file), file);
	bpf_probe_read_user_str(c.func, sizeof(c.func), func);
	n = bpf_map_lookup_elem(&calls, &c);
	if (!n) {
		// Threads may insert the key at once: one insert wins, and
		// every thread counts in the entry it made.
		bpf_map_update_elem(&calls, &c, &zero, BPF_NOEXIST);
		n = bpf_map_lookup_elem(&calls, &c);
		if (!n)
			return 0;
	}
	__sync_fetch_and_add(n, 1);
	return 0;
}
