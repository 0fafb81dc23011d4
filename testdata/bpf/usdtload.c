// usdtload: libbpf's own USDT loader, the oracle of probeopt's USDT
// argument specs. "usdtload OBJ PID PATH PROG:PROVIDER:NAME:COOKIE ..."
// opens and loads the BPF object with libbpf, attaches each program to
// the USDT probe of PATH in process PID with bpf_program__attach_usdt
// (the cookie as bpf_usdt_opts.usdt_cookie) and prints "attached", or
// "refused PROG:PROVIDER:NAME ERRNO" for an attachment libbpf refuses
// (the others are made). Once a line arrives on stdin it prints every
// map's entries, "NAME KEYHEX VALUEHEX" (a per-CPU map's values summed
// as 64-bit words), "end", and exits.
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void hex(const unsigned char *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		printf("%02x", p[i]);
}

int main(int argc, char **argv)
{
	if (argc < 4)
		return 2;
	libbpf_set_strict_mode(LIBBPF_STRICT_ALL);
	struct bpf_object *obj = bpf_object__open_file(argv[1], NULL);
	if (!obj || bpf_object__load(obj)) {
		fprintf(stderr, "usdtload: load %s: %s\n", argv[1], strerror(errno));
		return 1;
	}
	pid_t pid = atoi(argv[2]);
	for (int i = 4; i < argc; i++) {
		char spec[256];
		snprintf(spec, sizeof spec, "%s", argv[i]);
		char *prog = strtok(spec, ":"), *provider = strtok(NULL, ":"), *name = strtok(NULL, ":"),
		     *cookie = strtok(NULL, ":");
		if (!cookie)
			return 2;
		struct bpf_program *p = bpf_object__find_program_by_name(obj, prog);
		if (!p)
			return 2;
		LIBBPF_OPTS(bpf_usdt_opts, opts, .usdt_cookie = strtoull(cookie, NULL, 0));
		struct bpf_link *l = bpf_program__attach_usdt(p, pid, argv[3], provider, name, &opts);
		if (!l)
			printf("refused %s:%s:%s %d\n", prog, provider, name, errno);
	}
	printf("attached\n");
	fflush(stdout);
	char line[16];
	if (!fgets(line, sizeof line, stdin))
		return 3;
	struct bpf_map *m;
	bpf_object__for_each_map(m, obj) {
		const char *name = bpf_map__name(m);
		if (name[0] == '.' || strchr(name, '.'))
			continue;
		int fd = bpf_map__fd(m);
		size_t ks = bpf_map__key_size(m), vs = bpf_map__value_size(m);
		int percpu = bpf_map__type(m) == BPF_MAP_TYPE_PERCPU_ARRAY || bpf_map__type(m) == BPF_MAP_TYPE_PERCPU_HASH;
		int ncpu = percpu ? libbpf_num_possible_cpus() : 1;
		size_t stride = percpu ? (vs + 7) / 8 * 8 : vs;
		unsigned char *key = calloc(1, ks), *next = calloc(1, ks), *val = calloc(ncpu, stride),
			      *sum = calloc(1, vs);
		void *prev = NULL;
		while (bpf_map_get_next_key(fd, prev, next) == 0) {
			if (bpf_map_lookup_elem(fd, next, val) == 0) {
				memset(sum, 0, vs);
				for (int c = 0; c < ncpu; c++)
					for (size_t w = 0; w + 8 <= vs; w += 8) {
						uint64_t a, b;
						memcpy(&a, sum + w, 8);
						memcpy(&b, val + c * stride + w, 8);
						a += b;
						memcpy(sum + w, &a, 8);
					}
				if (!percpu)
					memcpy(sum, val, vs);
				printf("%s ", name);
				hex(next, ks);
				printf(" ");
				hex(sum, vs);
				printf("\n");
			}
			memcpy(key, next, ks);
			prev = key;
		}
		free(key);
		free(next);
		free(val);
		free(sum);
	}
	printf("end\n");
	fflush(stdout);
	return 0;
}
