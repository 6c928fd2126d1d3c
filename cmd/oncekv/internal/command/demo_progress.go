package command

import (
	"fmt"
	"io"
	"os"
	"sync/atomic"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// progress shows a bar on a terminal and a line per 10% otherwise.
type progress struct {
	bar   *progressbar.ProgressBar
	out   io.Writer
	total int
	done  atomic.Int64
}

func newProgress(out io.Writer, total int) *progress {
	p := &progress{out: out, total: total}
	if f, ok := out.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		p.bar = progressbar.NewOptions(total, progressbar.OptionSetWriter(os.Stderr), progressbar.OptionSetDescription("payments"),
			progressbar.OptionShowCount(), progressbar.OptionClearOnFinish())
	}
	return p
}

func (p *progress) add() {
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
