package decode

import (
	"sync"
	"testing"
)

// TestARM64TextConcurrent renders text from several goroutines at once;
// under -race it fails if a data race is left in the text path.
func TestARM64TextConcurrent(t *testing.T) {
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for w := uint32(0); w < 2000; w++ {
				inst, err := DecodeARM64([]byte{byte(w), byte(w >> 3), 0x20, 0x91}, 0x1000)
				if err == nil {
					_ = inst.Text()
				}
			}
		}()
	}
	wg.Wait()
}
