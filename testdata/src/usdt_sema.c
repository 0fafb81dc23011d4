/*
 * USDT probes guarded by semaphores: <sys/sdt.h> with _SDT_HAS_SEMAPHORES
 * expects a variable PROVIDER_NAME_semaphore in the .probes section for
 * every probe of this file.
 */
#define _SDT_HAS_SEMAPHORES 1
#include <sys/sdt.h>

#define SEMAPHORE(provider, name) \
	__extension__ unsigned short provider##_##name##_semaphore \
		__attribute__((unused)) __attribute__((section(".probes")))

SEMAPHORE(demo, sema_start);
SEMAPHORE(demo, sema_done);

void sema_probes(int n)
{
	if (demo_sema_start_semaphore)
		STAP_PROBE1(demo, sema_start, n);
	for (int i = 0; i < n; i++)
		if (demo_sema_done_semaphore)
			STAP_PROBE2(demo, sema_done, i, n);
}
