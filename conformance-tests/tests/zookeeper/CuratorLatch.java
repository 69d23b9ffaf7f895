// A real Curator LeaderLatch for the interop check (Debian's libcurator-recipes-java),
// run as a source file: `java -cp <jars> CuratorLatch.java <hosts> <path> <id>`.
// It starts the latch, then answers its stdin a line at a time:
//   await   waits until the latch leads, then prints LEADER
//   leader  prints LEADER_IS <the leader's participant id>
//   close   closes the latch (resigns or withdraws), then prints CLOSED
import java.io.BufferedReader;
import java.io.InputStreamReader;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.leader.LeaderLatch;
import org.apache.curator.retry.RetryOneTime;

public class CuratorLatch {
    public static void main(String[] args) throws Exception {
        CuratorFramework client = CuratorFrameworkFactory.newClient(args[0], new RetryOneTime(100));
        client.start();
        client.blockUntilConnected();
        LeaderLatch latch = new LeaderLatch(client, args[1], args[2]);
        latch.start();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        for (String line = in.readLine(); line != null; line = in.readLine()) {
            switch (line) {
                case "await":
                    latch.await();
                    System.out.println("LEADER");
                    break;
                case "leader":
                    System.out.println("LEADER_IS " + latch.getLeader().getId());
                    break;
                case "close":
                    latch.close();
                    System.out.println("CLOSED");
                    break;
                default:
                    System.out.println("UNKNOWN " + line);
            }
            System.out.flush();
        }
        client.close();
    }
}
