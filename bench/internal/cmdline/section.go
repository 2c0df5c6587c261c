package cmdline

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
)

// A Section is the part of a markdown file that a program rewrites with
// its latest run: what lies between the lines <!-- NAME:begin --> and
// <!-- NAME:end -->. The zero Section has no name and matches no file.
type Section struct {
	// Name is the section's marker name, as "soak" or "failover".
	Name string
}

// Begin returns the marker that opens the section.
func (s Section) Begin() string { return "<!-- " + s.Name + ":begin -->" }

// End returns the marker that closes the section.
func (s Section) End() string { return "<!-- " + s.Name + ":end -->" }

// bounds returns where the section's body begins and ends in doc, or an
// error if doc does not hold the markers once each, in order.
func (s Section) bounds(doc []byte) (begin, end int, err error) {
	b, e := []byte(s.Begin()), []byte(s.End())
	begin, end = bytes.Index(doc, b), bytes.Index(doc, e)
	switch {
	case begin < 0 || end < 0:
		return 0, 0, fmt.Errorf("no %s … %s section", s.Begin(), s.End())
	case end < begin:
		return 0, 0, fmt.Errorf("%s comes before %s", s.End(), s.Begin())
	case bytes.Count(doc, b) > 1 || bytes.Count(doc, e) > 1:
		return 0, 0, fmt.Errorf("more than one %s … %s section", s.Begin(), s.End())
	}
	return begin + len(b), end, nil
}

// Read returns the body of the section in doc, between its markers.
func (s Section) Read(doc []byte) (string, error) {
	begin, end, err := s.bounds(doc)
	if err != nil {
		return "", err
	}
	return string(doc[begin:end]), nil
}

// Replace returns doc with the section's body replaced by body, and the
// rest unchanged.
func (s Section) Replace(doc []byte, body string) ([]byte, error) {
	begin, end, err := s.bounds(doc)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	out.Write(doc[:begin])
	out.WriteString("\n")
	out.WriteString(body)
	if len(body) > 0 && body[len(body)-1] != '\n' {
		out.WriteString("\n")
	}
	out.Write(doc[end:])
	return out.Bytes(), nil
}

// Write rewrites the section of the markdown file at path with body. It
// writes a new file beside it and renames it over the old, so that a
// reader never sees half of it.
func (s Section) Write(path, body string) error {
	doc, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	out, err := s.Replace(doc, body)
	if err != nil {
		return fmt.Errorf("--doc %s: %w", path, err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+s.Name+"-*.md")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after a successful rename, there is nothing left to remove
	if _, err := tmp.Write(out); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(fi.Mode().Perm()); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
