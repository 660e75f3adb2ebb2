//! The crash tests of a CCEH table and of a tree (a B3-tree or the
//! sorted-leaf baseline): a run of inserts and
//! removes traced on a fresh structure, then every crash image the
//! persistency model allows (see `crash.rs`) recovered and checked against
//! the oracle:
//!
//! - recovery succeeds and the invariants hold (`verify`);
//! - the contents are those after the completed operations, or, for the
//!   one in flight, after it too: never anything else;
//! - recovering the recovered image again changes nothing (a crash during
//!   recovery is recovered the same way);
//! - the recovered table works (an insert and a search).
//!
//! The tests, `spillway pmem crashtest` and the benchmark run it.

use std::collections::HashMap;

use spillway_core::{Error, Result};

use crate::b3tree;
use crate::cceh::{Cceh, Options, KIND};
use crate::crash::{enumerate, CrashPoint, Limits, Report};
use crate::persist::{Tracing, Volatile};
use crate::region::Region;
use crate::tree::{Family, Sorted};

/// One operation of a crash run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    Insert(u64, u64),
    Remove(u64),
}

/// `count` operations drawn from `seed`: inserts of keys from a range a
/// third of `count` wide (so updates happen), and one remove in five.
pub fn random_operations(count: usize, seed: u64) -> Vec<Operation> {
    let mut state = seed | 1;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let keys = (count as u64 / 3).max(1);
    (0..count)
        .map(|i| {
            let key = next() % keys;
            if next() % 5 == 0 {
                Operation::Remove(key)
            } else {
                Operation::Insert(key, i as u64)
            }
        })
        .collect()
}

/// Traces `operations` on a fresh in-memory table of `options` and checks
/// every chosen crash image; stops at the first image that fails, with an
/// error naming the crash point.
pub fn crash_test(options: Options, operations: &[Operation], limits: Limits) -> Result<Report> {
    let table = Cceh::in_memory(options, Tracing::default())?;
    table.persist().take();
    let base = table.region().image();
    let states = run(table.persist(), operations, |operation| match operation {
        Operation::Insert(key, value) => table.insert(key, value).map(drop),
        Operation::Remove(key) => table.remove(key).map(drop),
    })?;
    enumerate(&base, &table.persist().take(), limits, |point, image| {
        check(point, image, &states)
    })
}

/// The same for a tree of family `F` (the B3-tree or the sorted-leaf
/// baseline) of `options` (small pages make splits and rebuilds frequent).
pub fn tree_crash_test<F: Family>(
    options: b3tree::Options,
    operations: &[Operation],
    limits: Limits,
) -> Result<Report> {
    let tree = F::Of::<Tracing>::in_memory(options, Tracing::default())?;
    tree.persist().take();
    let base = tree.region().image();
    let states = run(tree.persist(), operations, |operation| match operation {
        Operation::Insert(key, value) => tree.insert(key, value).map(drop),
        Operation::Remove(key) => tree.remove(key).map(drop),
    })?;
    enumerate(&base, &tree.persist().take(), limits, |point, image| {
        check_tree::<F>(point, image, &states)
    })
}

/// Applies `operations` one at a time, each marked in `trace` as an
/// operation; the contents before the first and after each.
fn run(
    trace: &Tracing,
    operations: &[Operation],
    mut apply: impl FnMut(Operation) -> Result<()>,
) -> Result<Vec<HashMap<u64, u64>>> {
    let mut states = vec![HashMap::new()];
    for &operation in operations {
        let mut state = states.last().expect("one state at least").clone();
        match operation {
            Operation::Insert(key, value) => {
                trace.begin("insert");
                state.insert(key, value);
            }
            Operation::Remove(key) => {
                trace.begin("remove");
                state.remove(&key);
            }
        }
        apply(operation)?;
        trace.end();
        states.push(state);
    }
    Ok(states)
}

/// What `get` finds of the keys of `now` and `next`.
fn searched(
    now: &HashMap<u64, u64>,
    next: Option<&HashMap<u64, u64>>,
    get: impl Fn(u64) -> Result<Option<u64>>,
) -> Result<HashMap<u64, u64>> {
    let mut seen = HashMap::new();
    for &key in now.keys().chain(next.into_iter().flat_map(HashMap::keys)) {
        if let Some(value) = get(key)? {
            seen.insert(key, value);
        }
    }
    Ok(seen)
}

/// A failure at `point`, named.
fn failure(point: &CrashPoint, what: String) -> Error {
    Error::Internal(format!(
        "crash image at event {} ({} operations completed, {:?} in flight): {what}",
        point.event, point.completed, point.in_flight
    ))
}

/// The contents after the completed operations, and after the one in
/// flight, if any.
fn expected<'a>(
    point: &CrashPoint,
    states: &'a [HashMap<u64, u64>],
) -> (&'a HashMap<u64, u64>, Option<&'a HashMap<u64, u64>>) {
    let next = states
        .get(point.completed + 1)
        .filter(|_| point.in_flight.is_some());
    (&states[point.completed], next)
}

fn check_tree<F: Family>(point: &CrashPoint, image: &[u8], states: &[HashMap<u64, u64>]) -> Result<()> {
    let fail = |what: String| Err(failure(point, what));
    let kind = <F::Of<Volatile> as Sorted<Volatile>>::KIND;
    let tree = match F::Of::<Volatile>::attach(Region::from_image(image, kind)?, Volatile::default()) {
        Ok(tree) => tree,
        Err(error) => return fail(format!("opening failed: {error}")),
    };
    let (now, next) = expected(point, states);
    // Searches at once (a B3-tree's recovery waits for the first write)
    // answer as the completed operations left the tree, or the one in
    // flight.
    let seen = searched(now, next, |key| tree.get(key))?;
    if &seen != now && Some(&seen) != next {
        return fail(format!(
            "searches after the open find {} keys, not the {} of the completed operations",
            seen.len(),
            now.len()
        ));
    }
    // So do scans, both ways, each key once.
    let forward = tree.entries()?;
    let scanned: HashMap<u64, u64> = forward.iter().copied().collect();
    if forward.len() != scanned.len() || (&scanned != now && Some(&scanned) != next) {
        return fail(format!(
            "a scan after the open finds {} keys, not the {} of the completed operations",
            scanned.len(),
            now.len()
        ));
    }
    let mut back = tree.range_rev(.., usize::MAX)?;
    back.reverse();
    if back != forward {
        return fail("a reverse scan after the open finds other keys than a forward one".into());
    }
    if let Err(error) = tree.verify() {
        return fail(format!("the recovered tree is not sound: {error}"));
    }
    let found: HashMap<u64, u64> = tree.entries()?.into_iter().collect();
    if &found != now && Some(&found) != next {
        return fail(format!(
            "{} keys recovered, expected the {} after the completed operations",
            found.len(),
            now.len()
        ));
    }
    let recovered = tree.region().image();
    let again = F::Of::<Volatile>::attach(Region::from_image(&recovered, kind)?, Volatile::default())?;
    if again.entries()? != tree.entries()? || again.verify().is_err() {
        return fail("recovering the recovered image changed it".into());
    }
    let probe = u64::MAX;
    let had = found.contains_key(&probe);
    again.insert(probe, 1)?;
    if again.get(probe)? != Some(1) || again.entries()?.len() != found.len() + usize::from(!had) {
        return fail("the recovered tree does not take an insert".into());
    }
    Ok(())
}

fn check(point: &CrashPoint, image: &[u8], states: &[HashMap<u64, u64>]) -> Result<()> {
    let fail = |what: String| Err(failure(point, what));
    let table = match Cceh::attach(Region::from_image(image, KIND)?, Volatile::default()) {
        Ok(table) => table,
        Err(error) => return fail(format!("opening failed: {error}")),
    };
    let (now, next) = expected(point, states);
    // Searches before the repair (which waits for the first write or
    // scan) answer as the completed operations left the table, or as the
    // one in flight did.
    let seen = searched(now, next, |key| Ok(table.get(key)))?;
    if &seen != now && Some(&seen) != next {
        return fail(format!(
            "searches before the repair find {} keys, not the {} of the completed operations",
            seen.len(),
            now.len()
        ));
    }
    if let Err(error) = table.verify() {
        return fail(format!("the recovered table is not sound: {error}"));
    }
    let found: HashMap<u64, u64> = table.entries()?.into_iter().collect();
    if &found != now && Some(&found) != next {
        return fail(format!(
            "{} keys recovered, expected the {} after the completed operations{}",
            found.len(),
            now.len(),
            next.map_or(String::new(), |next| format!(
                " or the {} after the one in flight",
                next.len()
            ))
        ));
    }
    let recovered = table.region().image();
    let again = Cceh::attach(Region::from_image(&recovered, KIND)?, Volatile::default())?;
    again.repaired()?;
    if again.region().image() != recovered {
        return fail("recovering the recovered image changed it".into());
    }
    let probe = u64::MAX;
    let had = found.get(&probe).copied();
    again.insert(probe, 1)?;
    if again.get(probe) != Some(1) || again.len()? != found.len() + usize::from(had.is_none()) {
        return fail("the recovered table does not take an insert".into());
    }
    Ok(())
}
