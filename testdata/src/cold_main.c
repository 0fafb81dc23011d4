/* Calls foo and bar of cold_x86.S; built by the probe tests. */
#include <stdio.h>
int foo(int);
int bar(int);
int main(void) {
	int s = 0;
	for (int i = -3; i < 3; i++)
		s = s * 7 + foo(i) * 3 + bar(i);
	printf("%d\n", s);
	return 0;
}
