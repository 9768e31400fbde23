import java.util.*;
import org.apache.kafka.common.protocol.types.*;

/** Prints each version of the share-group messages in kafka-clients: one line per field (path, wire type, nullable, tag; with --docs Kafka's doc). */
public class SchemaDump {
    static final String[] NAMES = {
        "ShareGroupHeartbeatRequest", "ShareGroupHeartbeatResponse",
        "ShareGroupDescribeRequest", "ShareGroupDescribeResponse",
        "ShareFetchRequest", "ShareFetchResponse",
        "ShareAcknowledgeRequest", "ShareAcknowledgeResponse",
        "DescribeShareGroupOffsetsRequest", "DescribeShareGroupOffsetsResponse",
        "AlterShareGroupOffsetsRequest", "AlterShareGroupOffsetsResponse",
        "DeleteShareGroupOffsetsRequest", "DeleteShareGroupOffsetsResponse",
    };

    public static void main(String[] args) throws Exception {
        boolean docs = args.length > 0 && args[0].equals("--docs");
        for (String name : NAMES) {
            Class<?> c = Class.forName("org.apache.kafka.common.message." + name + "Data");
            short lo = c.getField("LOWEST_SUPPORTED_VERSION").getShort(null);
            short hi = c.getField("HIGHEST_SUPPORTED_VERSION").getShort(null);
            Object msg = c.getDeclaredConstructor().newInstance();
            short key = (Short) c.getMethod("apiKey").invoke(msg);
            Schema[] schemas = (Schema[]) c.getField("SCHEMAS").get(null);
            System.out.println("# " + name + " key=" + key + " versions=" + lo + "-" + hi);
            for (int v = lo; v <= hi; v++) {
                System.out.println("## v" + v);
                walk(schemas[v], "", docs);
            }
        }
    }

    static void walk(Schema s, String prefix, boolean docs) {
        for (BoundField bf : s.fields()) {
            Field f = bf.def;
            if (f.type instanceof TaggedFields) {
                for (Map.Entry<Integer, Field> e : ((TaggedFields) f.type).fields().entrySet()) {
                    field(e.getValue(), prefix, " tag=" + e.getKey(), docs);
                }
            } else {
                field(f, prefix, "", docs);
            }
        }
    }

    static void field(Field f, String prefix, String tag, boolean docs) {
        String path = prefix + f.name;
        String doc = docs ? " doc=" + f.docString : "";
        Type t = f.type;
        if (t.isArray()) {
            Type elem = t.arrayElementType().get();
            String kind = (t instanceof CompactArrayOf) ? "COMPACT_ARRAY" : "ARRAY";
            if (elem instanceof Schema) {
                System.out.println(path + " " + kind + "(STRUCT) nullable=" + t.isNullable() + tag + doc);
                walk((Schema) elem, path + "[].", docs);
            } else {
                System.out.println(path + " " + kind + "(" + elem + ") nullable=" + t.isNullable() + tag + doc);
            }
        } else if (t instanceof Schema) {
            System.out.println(path + " STRUCT nullable=" + t.isNullable() + tag + doc);
            walk((Schema) t, path + ".", docs);
        } else {
            System.out.println(path + " " + t + " nullable=" + t.isNullable() + tag + doc);
        }
    }
}
