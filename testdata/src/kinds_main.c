/*
 * Driver for kinds_x86.S: prints "ready", then for each line read from
 * stdin calls the kind of that name three times and prints "done" (or
 * "unknown NAME").
 */
#include <stdio.h>
#include <string.h>

struct kind {
	const char *name;
	void (*fn)(void *);
};

extern const struct kind __start_kinds[], __stop_kinds[];

static unsigned char scratch[4096] __attribute__((aligned(64)));

int main(void)
{
	char line[256];

	setvbuf(stdout, NULL, _IONBF, 0);
	puts("ready");
	while (fgets(line, sizeof line, stdin)) {
		const struct kind *k;

		line[strcspn(line, "\n")] = 0;
		for (k = __start_kinds; k < __stop_kinds; k++)
			if (strcmp(k->name, line) == 0)
				break;
		if (k == __stop_kinds) {
			printf("unknown %s\n", line);
			continue;
		}
		for (int i = 0; i < 3; i++)
			k->fn(scratch);
		puts("done");
	}
	return 0;
}
