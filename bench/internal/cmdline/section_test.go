package cmdline_test

import (
	"testing"

	"github.com/outlast-llm/outlast/bench/internal/cmdline"
)

// The doc's section is replaced and read, and nothing else; a doc without
// exactly one section, in order, is an error.
func TestSection(t *testing.T) {
	t.Parallel()
	s := cmdline.Section{Name: "soak"}
	begin, end := s.Begin(), s.End()
	doc := "# R\n\n## Soak\n\n" + begin + "\n(old)\n" + end + "\n\n## Next\n\n<!-- x:begin -->\nkeep\n<!-- x:end -->\n"
	got, err := s.Replace([]byte(doc), "new\n")
	if err != nil {
		t.Fatal(err)
	}
	want := "# R\n\n## Soak\n\n" + begin + "\nnew\n" + end + "\n\n## Next\n\n<!-- x:begin -->\nkeep\n<!-- x:end -->\n"
	if string(got) != want {
		t.Errorf("Replace: got %q, want %q", got, want)
	}
	if body, err := s.Read(got); err != nil || body != "\nnew\n" {
		t.Errorf("Read: got %q, %v; want %q", body, err, "\nnew\n")
	}
	for _, bad := range []string{
		"no markers\n",
		end + "\n" + begin + "\n",                    // reversed
		begin + "\n" + end + "\n" + begin + end,      // twice
		"<!-- soaker:begin -->\n<!-- soaker:end -->", // another name
	} {
		if _, err := s.Replace([]byte(bad), "new\n"); err == nil {
			t.Errorf("Replace %q: got no error, want one", bad)
		}
		if _, err := s.Read([]byte(bad)); err == nil {
			t.Errorf("Read %q: got no error, want one", bad)
		}
	}
}
