package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/outlast-llm/outlast/bench/internal/cmdline"
)

// run is the program: it parses args, runs the three measurements, prints
// the report to stdout and each failed check to stderr.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	c, err := parseConfig(args, stderr)
	if err != nil {
		return err
	}
	b, err := newBench(ctx, c, stderr)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, b.close()) }()
	rep, err := b.run(ctx)
	if err != nil {
		return err
	}
	rep.Command = cmdline.CommandLine("redisgate", args)
	if err := cmdline.Report(stdout, c.JSON, rep, rep.markdown); err != nil {
		return err
	}
	return cmdline.CheckFailures(stderr, "redisgate", rep.Checks)
}

// bench is one run: its settings, its Redis and the Prefix of its keys.
type bench struct {
	cfg      config
	opts     *redis.Options // of --redis, for the clients each measurement makes
	client   *redis.Client  // for the holders' counter and the cleanup
	version  string
	prefix   string
	stderr   io.Writer // the children's stderr
	progress io.Writer // nil unless stderr is a terminal
}

// newBench connects to Redis, or says why it cannot.
func newBench(ctx context.Context, c config, stderr io.Writer) (*bench, error) {
	opts, err := parseRedisURL(c.RedisURL)
	if err != nil {
		return nil, err
	}
	client, err := dial(ctx, opts, 0)
	if err != nil {
		return nil, err
	}
	version, err := serverVersion(ctx, client)
	if err != nil {
		client.Close()
		return nil, err
	}
	return &bench{
		cfg: c, opts: opts, client: client, version: version, prefix: newPrefix(),
		stderr: &syncWriter{w: stderr}, progress: cmdline.Terminal(stderr),
	}, nil
}

// close deletes the run's keys and closes the client.
func (b *bench) close() error {
	err := deletePrefix(context.Background(), b.client, b.prefix)
	return errors.Join(err, b.client.Close())
}

// run runs the measurements in the order the report lists them.
func (b *bench) run(ctx context.Context) (*report, error) {
	rep := &report{
		Go: runtime.Version(), GOMAXPROCS: runtime.GOMAXPROCS(0), NumCPU: runtime.NumCPU(),
		Redis: b.version, Addr: b.opts.Addr, Config: b.cfg,
	}
	start := time.Now()
	var err error
	b.progressf("uncontended: %d acquire+release pairs per gate", b.cfg.Iterations)
	if rep.Uncontended, err = b.uncontended(ctx); err != nil {
		return nil, fmt.Errorf("uncontended: %w", err)
	}
	if rep.Contended, err = b.contended(ctx); err != nil {
		return nil, fmt.Errorf("contended: %w", err)
	}
	b.progressf("hand-off: %d per setup", b.cfg.Handoffs)
	if rep.Handoff, err = b.handoffs(ctx); err != nil {
		return nil, fmt.Errorf("hand-off: %w", err)
	}
	rep.Seconds = time.Since(start).Seconds()
	rep.Checks = rep.check(b.cfg)
	return rep, nil
}

func (b *bench) progressf(format string, args ...any) {
	if b.progress != nil {
		fmt.Fprintf(b.progress, "redisgate: "+format+"\n", args...)
	}
}
