/* tracelib: a shared library the tracee loads with dlopen. */
__attribute__((noinline)) static unsigned long lib_step(unsigned long h, long i)
{
	return (h ^ (unsigned long)i) * 1099511628211UL;
}

__attribute__((noinline)) unsigned long lib_square(long i)
{
	return (unsigned long)(i * i);
}

unsigned long lib_work(long n)
{
	unsigned long h = 14695981039346656037UL;
	for (long i = 0; i < n; i++)
		h = lib_step(h, (long)lib_square(i));
	return h;
}
