// One Apache Curator lock client (Debian's libcurator-recipes-java), driven over
// stdin/stdout by lock-bench, as kazoo_worker.py is: each input line is a command,
// each output line its answer ("ok ..." or "err ..."). Run as a source file:
// `java -cp <jars> CuratorWorker.java <hosts> <path> [N]`; with N, an
// InterProcessSemaphoreV2 of N leases instead of an InterProcessMutex.
//   acquire        blocks until the mutex (or a lease of the semaphore) is held
//   release        releases it
//   cycles N       N uncontended acquire + release cycles, timed here (microseconds)
// Before it answers "ok ready" it runs a few hundred untimed cycles, so the first
// timed ones do not pay for class loading and the first compilations.
import java.io.BufferedReader;
import java.io.InputStreamReader;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.InterProcessSemaphoreV2;
import org.apache.curator.framework.recipes.locks.Lease;
import org.apache.curator.retry.RetryOneTime;

public class CuratorWorker {
    private static final int WARM_UP = 300;

    interface Lock {
        void acquire() throws Exception;
        void release() throws Exception;
    }

    public static void main(String[] args) throws Exception {
        // A 10 s session: a worker killed while holding frees the lock within that.
        CuratorFramework client =
            CuratorFrameworkFactory.newClient(args[0], 10_000, 5_000, new RetryOneTime(100));
        client.start();
        client.blockUntilConnected();
        Lock lock;
        if (args.length > 2) {
            InterProcessSemaphoreV2 semaphore =
                new InterProcessSemaphoreV2(client, args[1], Integer.parseInt(args[2]));
            lock = new Lock() {
                private Lease lease;
                public void acquire() throws Exception { lease = semaphore.acquire(); }
                public void release() throws Exception {
                    // close(), not returnLease(): a failed release is reported, not swallowed.
                    lease.close();
                    lease = null;
                }
            };
        } else {
            InterProcessMutex mutex = new InterProcessMutex(client, args[1]);
            lock = new Lock() {
                public void acquire() throws Exception { mutex.acquire(); }
                public void release() throws Exception { mutex.release(); }
            };
        }
        for (int i = 0; i < WARM_UP; i++) {
            lock.acquire();
            lock.release();
        }
        System.out.println("ok ready");
        System.out.flush();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        for (String line = in.readLine(); line != null; line = in.readLine()) {
            String[] words = line.trim().split("\\s+");
            try {
                if (words.length == 1 && words[0].equals("acquire")) {
                    lock.acquire();
                    System.out.println("ok");
                } else if (words.length == 1 && words[0].equals("release")) {
                    lock.release();
                    System.out.println("ok");
                } else if (words.length == 2 && words[0].equals("cycles")) {
                    int n = Integer.parseInt(words[1]);
                    StringBuilder took = new StringBuilder("ok");
                    for (int i = 0; i < n; i++) {
                        long started = System.nanoTime();
                        lock.acquire();
                        lock.release();
                        took.append(' ').append((System.nanoTime() - started) / 1000);
                    }
                    System.out.println(took);
                } else {
                    System.out.println("err unknown command: " + line.trim());
                }
            } catch (Exception e) {
                // Reported to the bench, which stops this contender.
                System.out.println("err " + e.toString().replace('\n', ' '));
            }
            System.out.flush();
        }
        client.close();
    }
}
