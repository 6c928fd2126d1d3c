//go:build failpoints

package failpoint

import (
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/oncekv/oncekv/internal/selfkill"
)

// Enabled reports whether this build can crash at failpoints.
const Enabled = true

var (
	once   sync.Once
	target string
	hit    int
	mu     sync.Mutex
	count  int
)

func load() {
	spec := os.Getenv("ONCEKV_FAILPOINT")
	name, n, ok := strings.Cut(spec, "@")
	target, hit = name, 1
	if ok {
		if v, err := strconv.Atoi(n); err == nil && v > 0 {
			hit = v
		}
	}
}

// Inject kills the process with SIGKILL the hit-th time the configured
// failpoint is reached.
func Inject(name string) {
	once.Do(load)
	if name != target {
		return
	}
	mu.Lock()
	count++
	c := count
	mu.Unlock()
	if c == hit {
		selfkill.Now() // SIGKILL; TerminateProcess on Windows
	}
}
