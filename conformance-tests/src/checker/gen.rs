//! The operations of one run, made from a seed.

use lock_core::{Capabilities, LockKind};

/// A small seeded generator (SplitMix64): the same seed gives the same plan, on every
/// machine, with no dependency whose output could change between versions.
#[derive(Clone, Debug)]
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Self {
        Rng(seed ^ 0x5DEE_CE66_D1CE_4E5B)
    }

    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n > 0`).
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// A number in `lo..=hi`.
    pub(crate) fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }

    /// True `percent` times in a hundred.
    pub(crate) fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    /// One of `items` (not empty).
    pub(crate) fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len() as u64) as usize]
    }
}

/// How many permits every semaphore of a run has.
pub(crate) const PERMITS: u32 = 2;
/// How long the holder of an episode whose downgrade a fault is aimed at keeps the read
/// side, in ms: past the end of the downgrade's earlier asks on a client with 1 s
/// request timeouts (a call's statement may run on for three of them).
const AIMED_HOLD_MS: u64 = 5_000;
/// The fixed write lease of such an episode, in ms: longer than the fault and the asks.
const AIMED_WRITE_LEASE_MS: u64 = 10_000;
/// How long the contender of such an episode sleeps before it asks, in ms.
const AIMED_CONTENDER_SLEEP_MS: u64 = 1_500;

/// Which lock a handle is on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Family {
    Exclusive,
    Fair,
    ReadWrite,
    /// A semaphore of [`PERMITS`] permits.
    Semaphore,
    /// An election: its leadership is held like an exclusive lock.
    Election,
}

/// How long an acquire waits.
#[derive(Clone, Copy, Debug)]
pub(crate) enum WaitPlan {
    Try,
    For(u64),
    Forever,
}

/// Which lease an acquire asks for.
#[derive(Clone, Copy, Debug)]
pub(crate) enum LeasePlan {
    Watchdog,
    Fixed(u64),
}

/// How an acquire is called: its options, and what may cut it short.
#[derive(Clone, Copy, Debug)]
pub(crate) struct CallPlan {
    pub(crate) wait: WaitPlan,
    pub(crate) lease: LeasePlan,
    /// The future is dropped after this many ms (a `select!` against a sleep).
    pub(crate) cancel_ms: Option<u64>,
    /// The call runs inside `tokio::time::timeout` of this many ms.
    pub(crate) timeout_ms: Option<u64>,
}

/// One step of a task. `pick` chooses among the guards the task holds (modulo their
/// number); a step with nothing to pick from does nothing.
#[derive(Clone, Debug)]
pub(crate) enum Op {
    /// Acquire through a handle of the task's client.
    Acquire {
        handle: usize,
        kind: LockKind,
        call: CallPlan,
    },
    /// Acquire a MultiLock over some handles of the task's client, in the given order.
    Multi {
        members: Vec<(usize, LockKind)>,
        call: CallPlan,
    },
    Reenter {
        pick: usize,
    },
    /// Downgrade a write guard. With `cut_ms`, the first ask is cut short after that
    /// long (its future dropped, its calls perhaps still on their way). An ask that did
    /// not answer or failed retryably is asked again at once, a few times: the same
    /// owner asking while its earlier calls may still be on their way.
    Downgrade {
        pick: usize,
        cut_ms: Option<u64>,
    },
    Release {
        pick: usize,
    },
    Drop {
        pick: usize,
    },
    Extend {
        pick: usize,
        ms: u64,
    },
    /// Stay, checking every held lock on the way.
    Hold {
        ms: u64,
    },
    Sleep {
        ms: u64,
    },
}

/// A client: its own connection and watchdog.
#[derive(Clone, Debug)]
pub(crate) struct ClientPlan {
    pub(crate) watchdog_ms: u64,
}

/// A lock handle of one client, shared by every task of that client that uses it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct HandlePlan {
    pub(crate) client: usize,
    pub(crate) family: Family,
    pub(crate) name: usize,
}

/// A task: one client's ops in order.
#[derive(Clone, Debug)]
pub(crate) struct TaskPlan {
    pub(crate) client: usize,
    pub(crate) ops: Vec<Op>,
}

/// Everything one run does.
#[derive(Clone, Debug)]
pub(crate) struct Plan {
    pub(crate) seed: u64,
    pub(crate) names: Vec<String>,
    pub(crate) clients: Vec<ClientPlan>,
    pub(crate) handles: Vec<HandlePlan>,
    pub(crate) tasks: Vec<TaskPlan>,
    /// A client shut down this many ms into the run.
    pub(crate) shutdown: Option<(usize, u64)>,
    /// Cut the faulty client off from its server (only with a fault hook).
    pub(crate) cut: Option<CutPlan>,
    /// Freeze the server itself for a while (only with a hook that can).
    pub(crate) pause: Option<PausePlan>,
    /// Kill the server and start it again (only with a hook that can; never in a run
    /// that freezes it).
    pub(crate) restart: Option<RestartPlan>,
    /// A fault on one member of a cluster (only with a hook that has members).
    pub(crate) member: Option<MemberPlan>,
}

/// A fault on one member of a cluster (etcd, ZooKeeper, RedLock's masters), healed
/// before the run ends: the others go on, and the clients must find them.
#[derive(Clone, Copy, Debug)]
pub(crate) struct MemberPlan {
    /// When, in ms into the run.
    pub(crate) at_ms: u64,
    pub(crate) fault: MemberFault,
    /// How long until it is healed (its network back, thawed, started again), in ms.
    pub(crate) for_ms: u64,
}

/// What happens to the member.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MemberFault {
    /// Cut the leader off from its peers and the clients.
    IsolateLeader,
    /// Cut one member that does not lead off.
    IsolateFollower,
    /// Freeze the leader.
    PauseLeader,
    /// SIGKILL the leader, then start it again with its data.
    KillLeader,
}

/// The server killed (SIGKILL) and started again with its data: every connection
/// drops, and nothing answers until it serves again.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RestartPlan {
    /// When, in ms into the run.
    pub(crate) at_ms: u64,
    /// How long it stays down before it is started again, in ms (a server that forgets
    /// its locks when it restarts stays down for the longest lease, whatever this says).
    pub(crate) down_ms: u64,
}

/// The server frozen (SIGSTOP, `docker pause`): its connections stay open and nothing
/// answers any client until it is thawed.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PausePlan {
    /// When, in ms into the run.
    pub(crate) at_ms: u64,
    /// For how long, in ms.
    pub(crate) for_ms: u64,
}

/// A network fault between client 0 and its server.
#[derive(Clone, Copy, Debug)]
pub(crate) struct CutPlan {
    /// When, in ms into the run.
    pub(crate) at_ms: u64,
    /// Only the server's replies are lost (requests still act on the server);
    /// otherwise every byte both ways.
    pub(crate) replies_only: bool,
    /// The network comes back this many ms after the cut (connections made before
    /// are closed at their next byte); `None`: it stays cut.
    pub(crate) heal_after_ms: Option<u64>,
    /// Instead of a cut, every reply reaches the client this many ms late, in order
    /// (nothing is lost; replies arrive after calls timed out), until the heal.
    pub(crate) delay_ms: Option<u64>,
    /// The fault starts as client 0 first asks to downgrade, before that request goes
    /// out (a while after `at_ms` if it never does): the downgrade fails for a while
    /// and is asked again, as the network comes back, while the earlier asks' calls
    /// may still be on their way.
    pub(crate) at_downgrade: bool,
}

impl Plan {
    /// How many ops the tasks have in all.
    pub(crate) fn op_count(&self) -> usize {
        self.tasks.iter().map(|t| t.ops.len()).sum()
    }

    /// The longest fixed lease any op asks for, in ms.
    pub(crate) fn longest_lease_ms(&self) -> u64 {
        let mut longest = self
            .clients
            .iter()
            .map(|c| c.watchdog_ms)
            .max()
            .unwrap_or(0);
        for op in self.tasks.iter().flat_map(|t| &t.ops) {
            let ms = match op {
                Op::Acquire { call, .. } | Op::Multi { call, .. } => match call.lease {
                    LeasePlan::Fixed(ms) => ms,
                    LeasePlan::Watchdog => 0,
                },
                Op::Extend { ms, .. } => *ms,
                _ => 0,
            };
            longest = longest.max(ms);
        }
        longest
    }
}

/// What the generator may use: the backend's capabilities, whether a client can be
/// cut off, and whether the server can be frozen and restarted.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limits {
    pub(crate) caps: Capabilities,
    pub(crate) can_cut: bool,
    pub(crate) can_pause: bool,
    pub(crate) can_restart: bool,
    pub(crate) can_fault_members: bool,
}

/// The plan for `seed`.
pub(crate) fn generate(seed: u64, limits: Limits) -> Plan {
    let mut rng = Rng::new(seed);
    let caps = limits.caps;
    let names: Vec<String> = (0..rng.range(2, 3)).map(|i| format!("n{i}")).collect();
    let mut families = vec![Family::Exclusive];
    if caps.fair {
        families.push(Family::Fair);
    }
    if caps.read_write {
        families.push(Family::ReadWrite);
        // Read-write locks have the most interleavings (downgrades, shared readers).
        families.push(Family::ReadWrite);
    }
    if caps.semaphore {
        families.push(Family::Semaphore);
    }
    if caps.election {
        families.push(Family::Election);
    }
    let clients: Vec<ClientPlan> = (0..rng.range(3, 4))
        .map(|_| ClientPlan {
            watchdog_ms: rng.pick(&[600, 1_000, 1_500, 3_000]),
        })
        .collect();
    let mut handles = Vec::new();
    for client in 0..clients.len() {
        for _ in 0..rng.range(2, 4) {
            handles.push(HandlePlan {
                client,
                family: rng.pick(&families),
                name: rng.below(names.len() as u64) as usize,
            });
        }
    }
    let mut tasks = Vec::new();
    for client in 0..clients.len() {
        let mine: Vec<usize> = (0..handles.len())
            .filter(|&h| handles[h].client == client)
            .collect();
        for _ in 0..rng.range(1, 3) {
            let ops = (0..rng.range(4, 12))
                .map(|_| op(&mut rng, &handles, &mine, caps))
                .collect();
            tasks.push(TaskPlan { client, ops });
        }
    }
    let shutdown = rng.chance(30).then(|| {
        (
            rng.below(clients.len() as u64) as usize,
            rng.range(0, 3_000),
        )
    });
    let mut cut = (limits.can_cut && rng.chance(50)).then(|| CutPlan {
        at_ms: rng.range(0, 3_000),
        replies_only: rng.chance(50),
        heal_after_ms: rng.chance(50).then(|| rng.range(200, 3_000)),
        delay_ms: None,
        at_downgrade: false,
    });
    // Drawn last, so the rest of a seed's workload is what it was without them.
    if caps.read_write {
        // Now and then the cut is aimed at the downgrade of an episode client 0 holds.
        let aimed = match cut.as_mut() {
            Some(cut) if rng.chance(40) => {
                cut.at_downgrade = true;
                cut.heal_after_ms = Some(rng.range(300, 2_500));
                true
            }
            _ => false,
        };
        for i in 0..rng.range(1, 2) {
            episode(
                &mut rng,
                names.len(),
                clients.len(),
                (aimed && i == 0).then(|| Aim {
                    holder: 0,
                    shut_down: shutdown.map(|(client, _)| client),
                }),
                &mut handles,
                &mut tasks,
                caps,
            );
        }
    }
    // Drawn last too: about one fault in three delays replies instead of losing them.
    if let Some(cut) = cut.as_mut() {
        if rng.chance(35) {
            cut.delay_ms = Some(rng.range(300, 4_000));
        }
    }
    // And last of all the server's pause, which a hook offers on a few targets.
    let pause = (limits.can_pause && rng.chance(50)).then(|| PausePlan {
        at_ms: rng.range(0, 3_000),
        for_ms: rng.range(300, 3_000),
    });
    // After it the server's restart, in half the runs that do not freeze it.
    let restart = (limits.can_restart && pause.is_none() && rng.chance(50)).then(|| RestartPlan {
        at_ms: rng.range(0, 3_000),
        down_ms: rng.pick(&[0, 200, 1_000, 2_500]),
    });
    // Last, the member fault, which only a cluster's hook offers.
    // Never beside the server's own pause or restart: one fault of the server at a
    // time, as the wait-limit check counts them.
    let member =
        (limits.can_fault_members && pause.is_none() && restart.is_none() && rng.chance(70)).then(
            || MemberPlan {
                at_ms: rng.range(0, 3_000),
                fault: rng.pick(&[
                    MemberFault::IsolateLeader,
                    MemberFault::IsolateFollower,
                    MemberFault::PauseLeader,
                    MemberFault::KillLeader,
                ]),
                for_ms: rng.range(1_000, 4_000),
            },
        );
    Plan {
        seed,
        names,
        clients,
        handles,
        tasks,
        shutdown,
        cut,
        pause,
        restart,
        member,
    }
}

/// A fault aimed at an episode's downgrade: the client it cuts off, which holds the
/// episode, and the client the run shuts down, if any.
#[derive(Clone, Copy, Debug)]
struct Aim {
    holder: usize,
    shut_down: Option<usize>,
}

/// A read-write episode: the interleavings single random ops rarely line up. On a
/// random name, through two handles of their own (two clients, or now and then one
/// client), a holder task takes the write side, and a contender task asks for that
/// lock (mostly the write side) with a long wait a moment later, so it is queued
/// behind the writer. The holder then downgrades (now and then cut short and asked
/// again at once) and either
///
/// - releases the write side, keeping only the read side for a while (the queued
///   writer must go on waiting for it), or
/// - asks for the write side again through the same handle while it holds the read
///   side, mostly once its fixed write lease ran out (shortened by an extend, where
///   leases can be fixed) while its write guard is still alive: that acquire is
///   another owner and must wait for the read side.
///
/// With an [`Aim`], the holder's write lease is a fixed one of 10 s where leases can be
/// fixed, it releases the write side once downgraded and keeps the read side, and the
/// contender, of a client that neither the fault nor the run's shutdown touches, waits
/// for longer than the downgrade's earlier asks may take to end.
fn episode(
    rng: &mut Rng,
    names: usize,
    clients: usize,
    aim: Option<Aim>,
    handles: &mut Vec<HandlePlan>,
    tasks: &mut Vec<TaskPlan>,
    caps: Capabilities,
) {
    let name = rng.below(names as u64) as usize;
    let aimed = aim.is_some();
    let drawn_holder = rng.below(clients as u64) as usize;
    let holder = aim.map_or(drawn_holder, |aim| aim.holder);
    let shut_down = aim.and_then(|aim| aim.shut_down);
    let drawn_other = if rng.chance(80) {
        (holder + 1 + rng.below(clients as u64 - 1) as usize) % clients
    } else {
        holder
    };
    // Aimed at by a fault, the contender is of a client that neither the fault nor the
    // run's shutdown touches.
    let spared: Vec<usize> = (0..clients)
        .filter(|&c| c != holder && Some(c) != shut_down)
        .collect();
    let other = if aimed {
        spared[drawn_other % spared.len()]
    } else {
        drawn_other
    };
    let mine = handles.len();
    handles.push(HandlePlan {
        client: holder,
        family: Family::ReadWrite,
        name,
    });
    let theirs = handles.len();
    handles.push(HandlePlan {
        client: other,
        family: Family::ReadWrite,
        name,
    });
    // Aimed at by a fault, the downgrade is followed by the write side's release: the
    // read side alone then keeps the contender out.
    let releases_write_first = rng.chance(50) || aimed;
    // Asking again once the write lease ran out needs a fixed lease: a watchdog lease
    // is renewed until it is released.
    let write_runs_out = !releases_write_first && caps.fixed_lease && rng.chance(70);
    let mut lease = if write_runs_out || (caps.fixed_lease && rng.chance(30)) {
        LeasePlan::Fixed(rng.pick(&[1_000, 2_000]))
    } else {
        LeasePlan::Watchdog
    };
    if aimed && caps.fixed_lease {
        // A write lease that outlasts the fault, which its renewals would not.
        lease = LeasePlan::Fixed(AIMED_WRITE_LEASE_MS);
    }
    let first_hold = rng.pick(&[200, 400]);
    // Now and then the first ask to downgrade is cut short, and always when aimed at.
    let cut_ms = rng.chance(40).then(|| rng.pick(&[0, 1, 3, 10, 30, 5_000]));
    let waiting = |ms: u64| CallPlan {
        wait: WaitPlan::For(ms),
        lease: LeasePlan::Watchdog,
        cancel_ms: None,
        timeout_ms: None,
    };
    let mut ops = vec![
        Op::Acquire {
            handle: mine,
            kind: LockKind::Write,
            call: CallPlan {
                lease,
                ..waiting(1_000)
            },
        },
        // Long enough for the contender to be queued first.
        Op::Hold { ms: first_hold },
        // Held: [write]; then [write, read].
        Op::Downgrade {
            pick: 0,
            cut_ms: if aimed {
                // Its call runs on unanswered in the fault while the next asks are made.
                Some(cut_ms.filter(|&ms| ms < 5_000).unwrap_or(3))
            } else {
                cut_ms
            },
        },
    ];
    if releases_write_first {
        ops.push(Op::Hold {
            ms: rng.pick(&[0, 10, 100]),
        });
        ops.push(Op::Release { pick: 0 });
    } else {
        if write_runs_out {
            // The write lease ends during the hold below; the read lease lives on.
            ops.push(Op::Extend { pick: 0, ms: 100 });
            ops.push(Op::Hold { ms: 400 });
        } else {
            ops.push(Op::Hold {
                ms: rng.pick(&[10, 400]),
            });
        }
        ops.push(Op::Acquire {
            handle: mine,
            kind: LockKind::Write,
            call: waiting(rng.pick(&[300, 1_000])),
        });
        // The new write guard, if it was granted.
        ops.push(Op::Release { pick: 2 });
    }
    let last_hold = rng.pick(&[400, 1_200]);
    ops.push(Op::Hold {
        ms: if aimed { AIMED_HOLD_MS } else { last_hold },
    });
    tasks.push(TaskPlan {
        client: holder,
        ops,
    });
    // Aimed at, the contender asks for the side the read side keeps out.
    let kind = if rng.chance(75) || aimed {
        LockKind::Write
    } else {
        LockKind::Read
    };
    let contender_sleep = rng.pick(&[50, 100]);
    tasks.push(TaskPlan {
        client: other,
        ops: vec![
            // Long enough for the holder's write to be granted on a real server
            // (a ZooKeeper grant takes about 10 ms); aimed at, past the write's wait
            // and the hold before the downgrade, so that it is queued behind the
            // downgrade's read side.
            Op::Sleep {
                ms: if aimed {
                    AIMED_CONTENDER_SLEEP_MS
                } else {
                    contender_sleep
                },
            },
            Op::Acquire {
                handle: theirs,
                kind,
                call: waiting(if aimed { 2 * AIMED_HOLD_MS } else { 2_500 }),
            },
            Op::Hold {
                ms: rng.pick(&[10, 100]),
            },
        ],
    });
}

fn kind_for(rng: &mut Rng, family: Family) -> LockKind {
    match family {
        Family::Exclusive => LockKind::Exclusive,
        Family::Fair => LockKind::Fair,
        Family::ReadWrite if rng.chance(50) => LockKind::Read,
        Family::ReadWrite => LockKind::Write,
        Family::Semaphore => LockKind::Permit,
        Family::Election => LockKind::Leader,
    }
}

fn call(rng: &mut Rng, caps: Capabilities) -> CallPlan {
    let wait = match rng.below(10) {
        0..=2 => WaitPlan::Try,
        3..=7 => WaitPlan::For(rng.pick(&[0, 50, 300, 1_000, 2_500])),
        _ => WaitPlan::Forever,
    };
    let lease = if caps.fixed_lease && rng.chance(40) {
        LeasePlan::Fixed(rng.pick(&[150, 400, 1_000, 2_000]))
    } else {
        LeasePlan::Watchdog
    };
    let cancel_ms = rng.chance(15).then(|| rng.range(0, 800));
    // A wait without limit always runs under a timeout: two tasks each holding what
    // the other waits for would otherwise wait for ever, as they may.
    let timeout_ms = (matches!(wait, WaitPlan::Forever) || rng.chance(15))
        .then(|| rng.pick(&[1, 100, 700, 2_000, 4_000]));
    CallPlan {
        wait,
        lease,
        cancel_ms,
        timeout_ms,
    }
}

fn op(rng: &mut Rng, handles: &[HandlePlan], mine: &[usize], caps: Capabilities) -> Op {
    let pick = rng.below(8) as usize;
    match rng.below(100) {
        0..=34 => {
            let handle = rng.pick(mine);
            Op::Acquire {
                handle,
                kind: kind_for(rng, handles[handle].family),
                call: call(rng, caps),
            }
        }
        35..=42 => {
            // Distinct locks (a lock listed twice is refused), in random order.
            let mut members: Vec<(usize, LockKind)> = Vec::new();
            // A MultiLock takes locks and permits, not leaderships.
            let mut pool: Vec<usize> = mine
                .iter()
                .copied()
                .filter(|&h| handles[h].family != Family::Election)
                .collect();
            let count = rng.range(2, 3);
            while members.len() < count as usize && !pool.is_empty() {
                let handle = pool.swap_remove(rng.below(pool.len() as u64) as usize);
                let same = members.iter().any(|&(h, _)| {
                    handles[h].name == handles[handle].name
                        && handles[h].family == handles[handle].family
                });
                if !same {
                    members.push((handle, kind_for(rng, handles[handle].family)));
                }
            }
            if members.is_empty() {
                // Every handle of the task is an election's: nothing to take together.
                return Op::Sleep { ms: 0 };
            }
            Op::Multi {
                members,
                call: call(rng, caps),
            }
        }
        43..=49 => Op::Reenter { pick },
        50..=56 if caps.read_write => Op::Downgrade { pick, cut_ms: None },
        57..=67 => Op::Release { pick },
        68..=72 => Op::Drop { pick },
        73..=78 if caps.fixed_lease => Op::Extend {
            pick,
            ms: rng.pick(&[100, 500, 1_500]),
        },
        79..=91 => Op::Hold {
            ms: rng.pick(&[10, 100, 400, 1_200]),
        },
        _ => Op::Sleep {
            ms: rng.pick(&[0, 5, 50, 300]),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every lock type, and the faults a hook offers as `can` says: cut, pause, restart.
    fn limits(can: [bool; 3]) -> Limits {
        Limits {
            caps: Capabilities::ALL,
            can_cut: can[0],
            can_pause: can[1],
            can_restart: can[2],
            can_fault_members: false,
        }
    }

    #[test]
    fn a_member_fault_changes_nothing_else_of_a_seed() {
        let base = limits([false; 3]);
        let members = Limits {
            can_fault_members: true,
            ..base
        };
        let mut faulted = 0;
        for seed in 1..=40 {
            let mut plan = generate(seed, members);
            faulted += usize::from(plan.member.is_some());
            plan.member = None;
            assert_eq!(format!("{plan:?}"), format!("{:?}", generate(seed, base)));
        }
        assert!(
            (18..=38).contains(&faulted),
            "{faulted} of 40 seeds faulted"
        );
    }

    #[test]
    fn same_seed_same_plan() {
        let limits = limits([false; 3]);
        let a = format!("{:?}", generate(7, limits));
        assert_eq!(a, format!("{:?}", generate(7, limits)));
        assert_ne!(a, format!("{:?}", generate(8, limits)));
    }

    #[test]
    fn a_server_pause_changes_nothing_else_of_a_seed() {
        let (base, pausing) = (limits([true, false, false]), limits([true, true, false]));
        let mut paused = 0;
        for seed in 1..=40 {
            let mut plan = generate(seed, pausing);
            paused += usize::from(plan.pause.is_some());
            plan.pause = None;
            assert_eq!(format!("{plan:?}"), format!("{:?}", generate(seed, base)));
        }
        assert!((10..=30).contains(&paused), "{paused} of 40 seeds paused");
    }

    #[test]
    fn a_server_restart_changes_nothing_else_of_a_seed() {
        let (base, restarting) = (limits([true, true, false]), limits([true; 3]));
        let mut restarted = 0;
        for seed in 1..=80 {
            let mut plan = generate(seed, restarting);
            if plan.restart.is_some() {
                restarted += 1;
                assert!(plan.pause.is_none(), "seed {seed} freezes and restarts");
            }
            plan.restart = None;
            assert_eq!(format!("{plan:?}"), format!("{:?}", generate(seed, base)));
        }
        assert!(
            (8..=32).contains(&restarted),
            "{restarted} of 80 seeds restarted"
        );
    }

    #[test]
    fn a_fault_aimed_at_a_downgrade_comes_with_client_0_downgrading() {
        let mut aimed = Vec::new();
        for seed in 1..=200 {
            let plan = generate(seed, limits([true, false, false]));
            let Some(cut) = plan.cut.filter(|cut| cut.at_downgrade) else {
                continue;
            };
            aimed.push(seed);
            assert!(cut.heal_after_ms.is_some(), "seed {seed}: never healed");
            let downgrades = plan
                .tasks
                .iter()
                .filter(|task| task.client == 0)
                .flat_map(|task| &task.ops)
                .any(|op| matches!(op, Op::Downgrade { .. }));
            assert!(downgrades, "seed {seed}: client 0 never downgrades");
        }
        // A cut in half the seeds, aimed in 4 of 10 of those.
        assert!(
            (20..=60).contains(&aimed.len()),
            "{} of 200 seeds aimed: {aimed:?}",
            aimed.len()
        );
    }
}
