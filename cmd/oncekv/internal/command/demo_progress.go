package command

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/schollz/progressbar/v3"
)

// progress shows a bar on a terminal and a line per 10% otherwise.
type progress struct {
	bar   *progressbar.ProgressBar
	out   *diagWriter
	total int
	mu    sync.Mutex // counts and prints in one step: the lines come in order
	done  atomic.Int64
}

func newProgress(out *diagWriter, total int) *progress {
	p := &progress{out: out, total: total}
	if out.tty != nil {
		p.bar = progressbar.NewOptions(total, progressbar.OptionSetWriter(out.tty), progressbar.OptionSetDescription("payments"),
			progressbar.OptionShowCount(), progressbar.OptionClearOnFinish())
	}
	return p
}

func (p *progress) add() {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := p.done.Add(1)
	if p.bar != nil {
		_ = p.bar.Add(1)
		return
	}
	if step := max(p.total/10, 1); n%int64(step) == 0 || int(n) == p.total {
		fmt.Fprintf(p.out, "%d/%d payments done\n", n, p.total)
	}
}

func (p *progress) finish() {
	if p.bar != nil {
		_ = p.bar.Finish()
	}
}
