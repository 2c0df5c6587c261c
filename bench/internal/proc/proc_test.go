package proc

import (
	"context"
	"io"
	"os/exec"
	"strings"
	"testing"
)

func TestAddrIn(t *testing.T) {
	for _, c := range []struct {
		line, want string
		ok         bool
	}{
		{"outlast: serving on http://127.0.0.1:4000 → http://up; the timeline is at http://127.0.0.1:4000/outlast/", "127.0.0.1:4000", true},
		{"outlast mock: listening on http://127.0.0.1:39, script: ok", "127.0.0.1:39", true},
		{"outlast: serving on nothing", "", false},
		{"serving on http://no-port/", "", false},
		{"another line http://127.0.0.1:1", "", false},
	} {
		got, ok := addrIn([]byte(c.line), []byte("on http"))
		if got != c.want || ok != c.ok {
			t.Errorf("addrIn(%q) = %q, %v; want %q, %v", c.line, got, ok, c.want, c.ok)
		}
	}
}

// TestStart checks that Start finds the address on a line written in
// pieces after other lines, copies all output, and reports a child that
// exits without saying where it listens.
func TestStart(t *testing.T) {
	var out strings.Builder
	cmd := exec.Command("sh", "-c", `echo starting; printf 'serving on http://127.0.0.1:'; echo '5/ ok'; echo after`)
	c, err := Start(context.Background(), cmd, &out, "serving on")
	if err != nil {
		t.Fatal(err)
	}
	if c.Addr != "127.0.0.1:5" {
		t.Errorf("Addr = %q, want 127.0.0.1:5", c.Addr)
	}
	c.Wait()
	if want := "starting\nserving on http://127.0.0.1:5/ ok\nafter\n"; out.String() != want {
		t.Errorf("output %q, want %q", out.String(), want)
	}

	_, err = Start(context.Background(), exec.Command("sh", "-c", "echo no address; exit 3"), io.Discard, "serving on")
	if err == nil || !strings.Contains(err.Error(), "exited before") {
		t.Errorf("a child that exits at once: err = %v, want one that says it exited", err)
	}
}
