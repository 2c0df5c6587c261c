package journal

import (
	"context"
	"database/sql"
	"fmt"
)

// SetMaxRun sets s's bound on Run, s being a Store that Open returned.
func SetMaxRun(s Store, n int) { s.(*sqlStore).maxRun = n }

// MaxBatch is the most records a Writer writes in one batch.
const MaxBatch = maxBatch

// LatestVersion is the schema version Open migrates a database to.
var LatestVersion = latestVersion

// MigrateTo brings db, a database of the dialect name names ("sqlite" or
// "postgres") opened under the Store, to the schema of the given version
// and no further: for tests of the migrations after it, which need rows
// written as an older replica wrote them.
func MigrateTo(ctx context.Context, db *sql.DB, name string, version int) error {
	d := map[string]*dialect{"sqlite": sqliteDialect, "postgres": postgresDialect}[name]
	if d == nil {
		return fmt.Errorf("no dialect %q", name)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() // after Commit, a no-op
	have, err := schemaVersion(ctx, tx, d)
	if err != nil {
		return err
	}
	for _, m := range migrations {
		if m.version <= have || m.version > version {
			continue
		}
		if err := apply(ctx, tx, d, m); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// UnknownState is what a state's name that this version does not know
// reads as.
const UnknownState = unknownState
