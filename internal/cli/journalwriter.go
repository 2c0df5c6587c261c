package cli

import (
	"strings"

	"github.com/outlast-llm/outlast/internal/journalproc"
)

// Writer modes, for --journal-writer.
const (
	writerProcess = "process"
	writerInline  = "inline"
)

// inProcessWriter says whether the store spec names is written by serve
// itself: PostgreSQL, whose writes spend their CPU on its server; SQLite
// in memory, which no other process can reach; and any with
// --journal-writer inline; and all where the writer's priority cannot be
// lowered.
func inProcessWriter(spec, mode string) bool {
	return mode == writerInline || !journalproc.CanLowerPriority || !strings.HasPrefix(spec, "sqlite:") || spec == "sqlite::memory:"
}
