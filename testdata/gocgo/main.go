// Command gocgo is the cgo fixture of the tests of Go events: goroutines
// locked to their threads (runtime.LockOSThread) and goroutines that roam
// between threads each call main.work a known number of times; work calls
// the C function c_work through cgo, which calls back into Go
// (main.goCallback, exported to C). Each goroutine prints its kernel
// thread id (for a locked one), its goroutine id (runtime.Stack's
// "goroutine N" line) and the sum of work's results.
//
// Usage: gocgo WORKERS CALLS
package main

/*
#include <stdint.h>

int64_t c_work(int64_t x); // cwork.c
*/
import "C"

import (
	"bytes"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"
	"syscall"
)

// goCallback is called from C, on the goroutine that called c_work.
//
//export goCallback
//go:noinline
func goCallback(x C.int64_t) C.int64_t { return 2 * x }

// work returns 2*(worker*1,000,000+call)+1, through C and back.
//
//go:noinline
func work(worker, call int) int {
	return int(C.c_work(C.int64_t(worker*1_000_000 + call)))
}

// goid returns the id of the calling goroutine, as runtime.Stack prints it.
func goid() int {
	b := make([]byte, 64)
	b = b[:runtime.Stack(b, false)]
	b = bytes.TrimPrefix(b, []byte("goroutine "))
	if i := bytes.IndexByte(b, ' '); i > 0 {
		n, err := strconv.Atoi(string(b[:i]))
		if err == nil {
			return n
		}
	}
	return -1
}

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: gocgo WORKERS CALLS")
		os.Exit(2)
	}
	workers, _ := strconv.Atoi(os.Args[1])
	calls, _ := strconv.Atoi(os.Args[2])
	lines := make([]string, 2*workers)
	var wg sync.WaitGroup
	for i := 0; i < 2*workers; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			isLocked := i < workers
			if isLocked {
				runtime.LockOSThread()
			}
			tid := syscall.Gettid()
			sum := 0
			for k := 0; k < calls; k++ {
				sum += work(i, k)
			}
			if !isLocked {
				tid = 0 // a roaming goroutine has no one thread
			}
			lines[i] = fmt.Sprintf("worker %d locked %t tid %d goid %d sum %d", i, isLocked, tid, goid(), sum)
		}(i)
	}
	wg.Wait()
	for _, l := range lines {
		fmt.Println(l)
	}
}
