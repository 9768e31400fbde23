import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.ByteBuffer;
import org.apache.kafka.common.protocol.Message;
import org.apache.kafka.common.protocol.MessageUtil;

/** Reads "label MessageName version json" lines; prints "label hex" of Kafka's own serialization of each. */
public class KafkaEncode {
    public static void main(String[] args) throws Exception {
        ObjectMapper mapper = new ObjectMapper();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        for (String line; (line = in.readLine()) != null; ) {
            String[] part = line.split(" ", 4);
            short version = Short.parseShort(part[2]);
            Class<?> converter = Class.forName("org.apache.kafka.common.message." + part[1] + "DataJsonConverter");
            Message message = (Message) converter.getMethod("read", JsonNode.class, short.class)
                .invoke(null, mapper.readTree(part[3]), version);
            ByteBuffer body = MessageUtil.toByteBufferAccessor(message, version).buffer();
            StringBuilder hex = new StringBuilder();
            while (body.hasRemaining()) hex.append(String.format("%02x", body.get()));
            System.out.println(part[0] + " " + hex);
        }
    }
}
