package cli

import (
	"bytes"
	"cmp"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/outlast-llm/outlast"
	"github.com/outlast-llm/outlast/gateway"
	"github.com/outlast-llm/outlast/internal/redact"
	"github.com/outlast-llm/outlast/server"
)

// usageError is a wrong flag, config file or URL. It reads as its message
// alone and wraps ErrUsage, so main prints one line and exits 2.
type usageError struct{ err error }

func (e *usageError) Error() string   { return "serve: " + e.err.Error() }
func (e *usageError) Unwrap() []error { return []error{ErrUsage, e.err} }

func usagef(format string, args ...any) error {
	return &usageError{fmt.Errorf(format, args...)}
}

// flagValue is a setting's flag: it keeps the text given, which load
// checks once it knows where the value goes.
type flagValue struct {
	s    *setting
	text string
	set  bool
}

func (v *flagValue) String() string     { return v.text }
func (v *flagValue) Set(s string) error { v.text, v.set = s, true; return nil }
func (v *flagValue) IsBoolFlag() bool   { return v.s.bool }

// serveConfig is what serve's settings make: the server's config, and
// what only the command uses, the least level of its log's lines.
type serveConfig struct {
	server.Config
	logLevel slog.Level
}

// serveFlags are serve's flags as given: --config, and one per setting.
type serveFlags struct {
	config   string
	settings map[string]*flagValue // by setting's flag name
}

func newServeFlags(fs *flag.FlagSet) *serveFlags {
	f := &serveFlags{settings: map[string]*flagValue{}}
	fs.StringVar(&f.config, "config", "", "a `FILE` of upstreams and settings, in YAML")
	for i := range settings {
		s := &settings[i]
		v := &flagValue{s: s, text: s.def}
		f.settings[s.flag] = v
		fs.Var(v, s.flag, s.help)
	}
	return f
}

// given returns the text of the setting's flag, if the command line gave
// it.
func (f *serveFlags) given(s *setting) (string, bool) {
	v := f.settings[s.flag]
	return v.text, v.set
}

// value is a setting's text and where it came from, to name in an error.
type value struct {
	text  string
	where string // "--waits" or "outlast.yaml line 12: upstreams[1].waits"
}

// pick returns the text of setting s: the flag's if the command line gave
// it, else the file's key if the file has it, else the default. ok is
// false when there is none of the three.
func (f *serveFlags) pick(s *setting, file fileValues, path string) (value, bool, error) {
	if text, ok := f.given(s); ok {
		return value{text, "--" + s.flag}, true, nil
	}
	if s.key == "token" && path == "" {
		if env := os.Getenv("OUTLAST_TOKEN"); env != "" {
			if _, inFile := file[s.key]; !inFile {
				return value{env, "$OUTLAST_TOKEN"}, true, nil
			}
		}
	}
	if n, ok := file[s.key]; ok {
		key := strings.TrimPrefix(path+"."+s.key, ".")
		text, err := nodeText(s, n)
		if err != nil {
			return value{}, false, usagef("%s line %d: %s: %v", f.config, n.Line, key, err)
		}
		return value{text, fmt.Sprintf("%s line %d: %s", f.config, n.Line, key)}, true, nil
	}
	return value{s.def, "the default of --" + s.flag}, s.def != "", nil
}

// apply sets s from v on t, naming v's origin in an error, and its
// value unless it is secret.
func apply(s *setting, v value, t target) error {
	if err := s.set(t, v.text); err != nil {
		if s.secret {
			return usagef("%s: %v", v.where, err)
		}
		return usagef("%s %q: %v", v.where, redact.Text(v.text), err)
	}
	return nil
}

// load checks the flags and reads the config file they name into the
// server's config. A flag given on the command line wins over the file,
// for every upstream; a key the file leaves out takes the flag's default.
func (f *serveFlags) load() (serveConfig, error) {
	var cfg serveConfig
	file, err := f.readFile()
	if err != nil {
		return cfg, err
	}
	for i := range settings {
		s := &settings[i]
		if s.scope != global {
			continue
		}
		v, ok, err := f.pick(s, file.global, "")
		if err != nil {
			return cfg, err
		}
		if ok {
			if err := apply(s, v, target{cfg: &cfg}); err != nil {
				return cfg, err
			}
		}
	}
	cfg.Gateway.Upstreams, err = f.upstreams(file)
	return cfg, err
}

// upstreams returns the file's upstreams with the flags given on the
// command line applied, or the one that --upstream names.
func (f *serveFlags) upstreams(file fileConfig) ([]gateway.Upstream, error) {
	_, one := f.given(settingNamed("upstream"))
	switch {
	case one && len(file.upstreams) > 0:
		return nil, usagef("give --upstream or upstreams in --config, not both")
	case one:
		u, err := f.upstream(fileValues{}, "")
		return []gateway.Upstream{u}, err
	case len(file.upstreams) == 0:
		return nil, usagef("give --upstream URL, or a --config file with upstreams")
	}
	for _, s := range settings {
		if _, ok := f.given(&s); ok && s.scope == identity {
			return nil, usagef("--%s goes with --upstream: each upstream of %s has a %s key of its own", s.flag, f.config, s.key)
		}
	}
	ups := make([]gateway.Upstream, len(file.upstreams))
	for i, entry := range file.upstreams {
		u, err := f.upstream(entry, fmt.Sprintf("upstreams[%d]", i))
		if err != nil {
			return nil, err
		}
		ups[i] = u
	}
	return ups, nil
}

// upstream returns the upstream that entry, the file's at path (or none
// for --upstream), and the flags describe.
func (f *serveFlags) upstream(entry fileValues, path string) (gateway.Upstream, error) {
	u := gateway.Upstream{Policy: &outlast.Policy{}}
	for i := range settings {
		s := &settings[i]
		if s.scope == global {
			continue
		}
		v, ok, err := f.pick(s, entry, path)
		if err != nil {
			return u, err
		}
		if !ok {
			if _, pool := entry["members"]; s.key == "url" && !pool {
				return u, usagef("%s: %s.url: missing: give the upstream's absolute http(s) URL, or members for a pool", f.config, path)
			}
			continue
		}
		if _, pool := entry["members"]; pool && s.key == "url" {
			return u, usagef("%s: %s.%s: a pool has members instead: give each member its %s", f.config, path, s.key, s.key)
		}
		if err := apply(s, v, target{up: &u}); err != nil {
			return u, err
		}
	}
	if n, ok := entry["members"]; ok {
		if err := f.members(&u, n, path); err != nil {
			return u, err
		}
	}
	if u.Name == "" {
		u.Name = u.URL.Host
	}
	if u.Admission != nil && u.Slots > 0 {
		// Recovery ends when the limit reaches the upstream's capacity.
		u.Admission.MaxLimit = u.Slots
	}
	if err := u.Policy.Validate(); err != nil {
		return u, usagef("%s: %s: %v", f.config, path, err)
	}
	return u, nil
}

// memberKeys are the keys of a pool member's entry, each a setting's
// key but weight.
var memberKeys = []string{"url", "name", "auth", "auth_header", "weight", "slots", "models"}

// members reads n, the members of the pool u at path, into u: each
// member's url, name, credential, weight, slots and model renames, and
// an admission controller of its own when u has admission on.
func (f *serveFlags) members(u *gateway.Upstream, n *yaml.Node, path string) error {
	if u.Name == "" {
		return usagef("%s line %d: %s: a pool needs a name, for the record and metrics", f.config, n.Line, path)
	}
	if n.Kind != yaml.SequenceNode || len(n.Content) == 0 {
		return usagef("%s line %d: %s.members: want a list of members, each with a url", f.config, n.Line, path)
	}
	for j, item := range n.Content {
		mpath := fmt.Sprintf("%s.members[%d]", path, j)
		var m gateway.Member
		tmp := gateway.Upstream{}
		keys := map[string]*yaml.Node{}
		if err := f.readMapping(item, mpath, member, func(key string, v *yaml.Node) error { keys[key] = v; return nil }); err != nil {
			return err
		}
		for _, key := range memberKeys { // in this order: auth before auth_header
			v, ok := keys[key]
			if !ok {
				continue
			}
			if key == "weight" {
				w, err := strconv.Atoi(strings.TrimSpace(v.Value))
				if err != nil || w < 1 || v.Kind != yaml.ScalarNode {
					return usagef("%s line %d: %s.weight %q: want a whole number, 1 or more, such as 2", f.config, v.Line, mpath, v.Value)
				}
				m.Weight = w
				continue
			}
			s := settingByKey(key)
			text, err := nodeText(s, v)
			if err != nil {
				return usagef("%s line %d: %s.%s: %v", f.config, v.Line, mpath, key, err)
			}
			if err := apply(s, value{text, fmt.Sprintf("%s line %d: %s.%s", f.config, v.Line, mpath, key)}, target{up: &tmp}); err != nil {
				return err
			}
		}
		if keys["url"] == nil {
			return usagef("%s line %d: %s.url: missing: give the member's absolute http(s) URL", f.config, item.Line, mpath)
		}
		m.Name, m.URL, m.Auth, m.Slots, m.Models = tmp.Name, tmp.URL, tmp.Auth, tmp.Slots, tmp.Models
		if m.Auth != nil && keys["auth_header"] == nil && u.Auth != nil {
			// The pool's header, for a member of the same API that holds
			// its own key: x-api-key for Anthropic, api-key for Azure.
			m.Auth = m.Auth.WithHeader(u.Auth.Header())
		}
		if m.Name == "" {
			m.Name = m.URL.Host
		}
		if u.Admission != nil {
			m.Admission = &outlast.Admission{RetryBudget: u.Admission.RetryBudget, MaxLimit: cmp.Or(m.Slots, u.Slots)}
		}
		u.Members = append(u.Members, m)
	}
	// Each member has its own; the pool has none.
	u.Admission = nil
	return nil
}

// settingByKey returns the setting whose config key is key.
func settingByKey(key string) *setting {
	for i := range settings {
		if settings[i].key == key {
			return &settings[i]
		}
	}
	panic("cli: no setting of key " + key) // a typo in this package
}

// settingNamed returns the setting whose flag is name.
func settingNamed(name string) *setting {
	for i := range settings {
		if settings[i].flag == name {
			return &settings[i]
		}
	}
	panic("cli: no setting " + name) // a typo in this package
}

// fileValues are the keys of one mapping of the config file.
type fileValues map[string]*yaml.Node

// fileConfig is the config file: its top-level keys, and each upstream's.
type fileConfig struct {
	global    fileValues
	upstreams []fileValues
}

// readFile reads the config file --config names, if any. Decoding is
// strict: a key that is not a setting's is refused with its line, so that
// a typo never leaves a default silently in place.
func (f *serveFlags) readFile() (fileConfig, error) {
	fc := fileConfig{global: fileValues{}}
	if f.config == "" {
		return fc, nil
	}
	data, err := os.ReadFile(f.config)
	if err != nil {
		return fc, usagef("--config: %v", err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
		return fc, nil // an empty file
	} else if err != nil {
		return fc, usagef("%s %s", f.config, strings.ReplaceAll(strings.TrimPrefix(err.Error(), "yaml: "), "\n", " "))
	}
	if err := dec.Decode(new(yaml.Node)); !errors.Is(err, io.EOF) {
		return fc, usagef("%s: holds more than one YAML document", f.config)
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
		return fc, nil // only comments
	}
	return fc, f.readMapping(root, "", global, func(key string, n *yaml.Node) error {
		if key != "upstreams" {
			fc.global[key] = n
			return nil
		}
		if n.Kind != yaml.SequenceNode {
			return usagef("%s line %d: upstreams: want a list of upstreams, each with a url", f.config, n.Line)
		}
		for i, item := range n.Content {
			entry := fileValues{}
			err := f.readMapping(item, fmt.Sprintf("upstreams[%d]", i), upstream, func(key string, v *yaml.Node) error {
				entry[key] = v
				return nil
			})
			if err != nil {
				return err
			}
			fc.upstreams = append(fc.upstreams, entry)
		}
		return nil
	})
}

// readMapping calls put for each key of the mapping n, at path in the
// file, refusing a key that is given twice or that no setting of scope
// has ("upstreams" at the top level and "members" in an upstream being
// the keys that are not a setting's; a member's keys are memberKeys).
func (f *serveFlags) readMapping(n *yaml.Node, path string, sc scope, put func(string, *yaml.Node) error) error {
	if n.Kind != yaml.MappingNode {
		such := ""
		if sc == member {
			such = ", such as url and auth"
		}
		return usagef("%s line %d: %s: want keys and values%s", f.config, n.Line, cmp.Or(path, "the file"), such)
	}
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if line, ok := seen[k.Value]; ok {
			return usagef("%s line %d: %s: key %q is given twice (first on line %d)", f.config, k.Line, cmp.Or(path, "the file"), k.Value, line)
		}
		seen[k.Value] = k.Line
		if !(sc == global && k.Value == "upstreams") && !(sc == upstream && k.Value == "members") && !hasKey(sc, k.Value) {
			return usagef("%s line %d: %s: unknown key %q%s", f.config, k.Line, cmp.Or(path, "the file"), k.Value, unknownKeyHint(sc, k.Value))
		}
		if err := put(k.Value, v); err != nil {
			return err
		}
	}
	return nil
}

// unknownKeyHint is what the error for key, which no setting of scope sc
// has, adds: the key of sc it is near; else, when it is a key of the
// other level or nearer one of its keys, that key and where it goes,
// since a timeout at the top level reads as a default for every
// upstream, which the file has no place for; else the keys of sc.
func unknownKeyHint(sc scope, key string) string {
	if sc == member {
		if hasKey(upstream, key) {
			return " (it is a key of the pool, which its members share)"
		}
		return " (want one of " + strings.Join(memberKeys, ", ") + ")"
	}
	other := upstream
	if sc == upstream {
		other = global
	}
	here := keysOf(sc)
	k, list, ok := closestOf(key, here, keysOf(other))
	switch {
	case !ok:
		return " (want one of " + strings.Join(here, ", ") + ")"
	case list == 0:
		return fmt.Sprintf(" (did you mean %s?)", quoted(k))
	case k == key:
		return fmt.Sprintf(" (it is %s)", keyPlace(other))
	}
	return fmt.Sprintf(" (did you mean %s, %s?)", quoted(k), keyPlace(other))
}

// keyPlace says where in the file a key of scope sc goes.
func keyPlace(sc scope) string {
	if sc == global {
		return "a top-level key"
	}
	return "a key of an upstream, under upstreams"
}

// hasKey reports whether a setting of scope sc (identity keys belong to
// upstreams too) has the key.
func hasKey(sc scope, key string) bool {
	if sc == member {
		return slices.Contains(memberKeys, key)
	}
	for _, s := range settings {
		if s.key == key && (s.scope == sc || sc == upstream && s.scope == identity) {
			return true
		}
	}
	return false
}

// keysOf returns the keys of scope sc, for an error, in the table's
// order.
func keysOf(sc scope) []string {
	var keys []string
	if sc == global {
		keys = append(keys, "upstreams")
	}
	for _, s := range settings {
		if s.scope == sc || sc == upstream && s.scope == identity {
			keys = append(keys, s.key)
		}
	}
	return keys
}

// nodeText returns the text of a key's value as s's flag would take it:
// a scalar as it is, and for a list setting a list joined with commas.
func nodeText(s *setting, n *yaml.Node) (string, error) {
	switch {
	case n.Kind == yaml.ScalarNode && n.Tag != "!!null":
		return n.Value, nil
	case n.Kind == yaml.SequenceNode && s.list:
		items := make([]string, len(n.Content))
		for i, item := range n.Content {
			if item.Kind != yaml.ScalarNode {
				return "", fmt.Errorf("want a list of values, such as [%s]", s.example)
			}
			items[i] = item.Value
		}
		return strings.Join(items, ","), nil
	case s.mapping:
		wantMapping := fmt.Errorf("want a mapping of names, such as {%s}", strings.Replace(s.example, "=", ": ", 1))
		if n.Kind != yaml.MappingNode {
			return "", wantMapping
		}
		pairs := make([]string, 0, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Kind != yaml.ScalarNode || v.Kind != yaml.ScalarNode {
				return "", wantMapping
			}
			if strings.ContainsAny(k.Value+v.Value, ",=") {
				// The mapping goes on as the flag's FROM=TO,… text.
				return "", fmt.Errorf("%q: %q: a name with , or = cannot be given here", k.Value, v.Value)
			}
			pairs = append(pairs, k.Value+"="+v.Value)
		}
		return strings.Join(pairs, ","), nil
	case s.list:
		return "", fmt.Errorf("want a value or a list of values, such as [%s]", s.example)
	}
	return "", fmt.Errorf("want one value, such as %s", s.example)
}
