import JSON

/// Validates a `canvas.present` card against the seed's vocabulary and limits. Every refusal names the
/// allowed vocabulary or the limit broken, so an agent can correct itself from the error alone.
public struct CanvasCard: Sendable, Equatable {
    public static let componentTypes = ["text", "checklist", "form", "chart", "metric"]
    public static let fieldKinds = ["text", "number", "choice", "toggle", "date"]
    public static let chartKinds = ["bar", "line"]
    public static let trends = ["up", "down", "flat"]
    public static let maximumComponents = 12
    public static let maximumFormFields = 12
    public static let maximumChecklistItems = 30
    public static let maximumChartSeries = 6
    public static let maximumChartPoints = 60

    /// The card as validated, to store and hand to the phone.
    public let json: JSONValue
    /// The form's id and field names, if the card has a form.
    public let form: (id: String, fields: [String: String])?
    /// Titles of the card's checklists.
    public let checklists: [String]
    /// True when the command keeps running until the person submits or dismisses (a form or a top-level submit).
    public let waitsForSubmit: Bool

    public static func == (a: CanvasCard, b: CanvasCard) -> Bool { a.json == b.json }

    public init(_ value: JSONValue) throws(JSONFieldError) {
        guard case .object(let top) = value else { throw JSONFieldError.invalid("card", "must be an object with title, body, items, components, submit") }
        let card = JSONObject(top, path: "card")
        try Self.allowOnly(card, ["title", "body", "items", "components", "submit"])
        _ = try card.optionalString("title", maxLength: 200)
        _ = try card.optionalString("body", maxLength: 8000)
        let submit = try card.optionalString("submit", maxLength: 60)
        if let items = try card.optionalArray("items") {
            guard items.count <= 50 else { throw JSONFieldError.invalid("card.items", "at most 50 items, got \(items.count)") }
            for (i, item) in items.enumerated() {
                switch item {
                case .string(let s) where s.count <= 500: break
                case .object(let o):
                    let entry = JSONObject(o, path: "card.items[\(i)]")
                    try Self.allowOnly(entry, ["title", "detail"])
                    _ = try entry.string("title", maxLength: 200)
                    _ = try entry.optionalString("detail", maxLength: 500)
                default: throw JSONFieldError.invalid("card.items[\(i)]", "must be text (at most 500 characters) or {title, detail}")
                }
            }
        }
        let components = try card.optionalArray("components") ?? []
        guard components.count <= Self.maximumComponents else {
            throw JSONFieldError.invalid("card.components", "a card has at most \(Self.maximumComponents) components, got \(components.count)")
        }
        if !card.has("title") && !card.has("body") && components.isEmpty && !card.has("items") {
            throw JSONFieldError.invalid("card", "needs at least one of title, body, items or components")
        }
        var form: (String, [String: String])?
        var checklists: [String] = []
        for (i, component) in components.enumerated() {
            let path = "card.components[\(i)]"
            guard case .object(let fields) = component else { throw JSONFieldError.invalid(path, "must be an object with a type") }
            let c = JSONObject(fields, path: path)
            let type = try c.string("type")
            switch type {
            case "text":
                try Self.allowOnly(c, ["type", "markdown"])
                _ = try c.string("markdown", maxLength: 8000)
            case "checklist":
                try Self.allowOnly(c, ["type", "title", "items"])
                let title = try c.string("title", maxLength: 200)
                guard !checklists.contains(title) else { throw JSONFieldError.invalid("\(path).title", "two checklists are both called '\(title)'; results are keyed by title") }
                checklists.append(title)
                let items = try c.optionalArray("items") ?? []
                guard !items.isEmpty, items.count <= Self.maximumChecklistItems else {
                    throw JSONFieldError.invalid("\(path).items", "a checklist has 1 to \(Self.maximumChecklistItems) items, got \(items.count)")
                }
                for (j, item) in items.enumerated() {
                    guard case .object(let o) = item else { throw JSONFieldError.invalid("\(path).items[\(j)]", "must be {label, done}") }
                    let entry = JSONObject(o, path: "\(path).items[\(j)]")
                    try Self.allowOnly(entry, ["label", "done"])
                    _ = try entry.string("label", maxLength: 200)
                    _ = try entry.optionalBool("done")
                }
            case "form":
                guard form == nil else { throw JSONFieldError.invalid(path, "a card has at most one form") }
                try Self.allowOnly(c, ["type", "id", "fields", "submit"])
                let id = try c.string("id", maxLength: 64)
                guard !id.isEmpty else { throw JSONFieldError.invalid("\(path).id", "must not be empty") }
                _ = try c.optionalString("submit", maxLength: 60)
                let list = try c.optionalArray("fields") ?? []
                guard !list.isEmpty, list.count <= Self.maximumFormFields else {
                    throw JSONFieldError.invalid("\(path).fields", "a form has 1 to \(Self.maximumFormFields) fields, got \(list.count)")
                }
                var names: [String: String] = [:]
                for (j, field) in list.enumerated() {
                    let fpath = "\(path).fields[\(j)]"
                    guard case .object(let o) = field else { throw JSONFieldError.invalid(fpath, "must be {name, label, kind, options, required, default}") }
                    let f = JSONObject(o, path: fpath)
                    try Self.allowOnly(f, ["name", "label", "kind", "options", "required", "default"])
                    let name = try f.string("name", maxLength: 64)
                    guard !name.isEmpty, names[name] == nil else { throw JSONFieldError.invalid("\(fpath).name", "field names must be non-empty and unique; '\(name)' is not") }
                    _ = try f.optionalString("label", maxLength: 200)
                    let kind = try f.string("kind")
                    guard Self.fieldKinds.contains(kind) else {
                        throw JSONFieldError.invalid("\(fpath).kind", "'\(kind)' is not a field kind; use one of \(Self.fieldKinds.joined(separator: ", "))")
                    }
                    _ = try f.optionalBool("required")
                    let options = try f.optionalArray("options")
                    if kind == "choice" {
                        guard let options, !options.isEmpty, options.count <= 30, options.allSatisfy({ $0.stringValue != nil }) else {
                            throw JSONFieldError.invalid("\(fpath).options", "a choice field needs 1 to 30 options, each text")
                        }
                    } else if options != nil {
                        throw JSONFieldError.invalid("\(fpath).options", "only a choice field has options")
                    }
                    if let value = f.fields["default"], value != .null {
                        let ok: Bool = switch kind {
                        case "number": value.numberValue != nil
                        case "toggle": value.boolValue != nil
                        case "choice": value.stringValue.map { v in options?.contains(.string(v)) ?? false } ?? false
                        default: value.stringValue != nil
                        }
                        guard ok else { throw JSONFieldError.invalid("\(fpath).default", "does not fit kind \(kind)" + (kind == "choice" ? " (it must be one of the options)" : "")) }
                    }
                    names[name] = kind
                }
                form = (id, names)
            case "chart":
                try Self.allowOnly(c, ["type", "title", "kind", "labels", "series"])
                _ = try c.optionalString("title", maxLength: 200)
                let kind = try c.string("kind")
                guard Self.chartKinds.contains(kind) else {
                    throw JSONFieldError.invalid("\(path).kind", "'\(kind)' is not a chart kind; use one of \(Self.chartKinds.joined(separator: ", "))")
                }
                let labels = try c.optionalArray("labels") ?? []
                guard labels.count <= Self.maximumChartPoints, labels.allSatisfy({ $0.stringValue != nil }) else {
                    throw JSONFieldError.invalid("\(path).labels", "at most \(Self.maximumChartPoints) labels, each text; got \(labels.count)")
                }
                let series = try c.optionalArray("series") ?? []
                guard !series.isEmpty, series.count <= Self.maximumChartSeries else {
                    throw JSONFieldError.invalid("\(path).series", "a chart has 1 to \(Self.maximumChartSeries) series, got \(series.count)")
                }
                for (j, s) in series.enumerated() {
                    guard case .object(let o) = s else { throw JSONFieldError.invalid("\(path).series[\(j)]", "must be {label, values}") }
                    let entry = JSONObject(o, path: "\(path).series[\(j)]")
                    try Self.allowOnly(entry, ["label", "values"])
                    _ = try entry.string("label", maxLength: 100)
                    let values = try entry.optionalArray("values") ?? []
                    guard values.count <= Self.maximumChartPoints else {
                        throw JSONFieldError.invalid("\(path).series[\(j)].values", "a series has at most \(Self.maximumChartPoints) points, got \(values.count)")
                    }
                    guard values.allSatisfy({ $0.numberValue?.isFinite == true }) else {
                        throw JSONFieldError.invalid("\(path).series[\(j)].values", "must all be numbers")
                    }
                    guard labels.isEmpty || values.count == labels.count else {
                        throw JSONFieldError.invalid("\(path).series[\(j)].values", "has \(values.count) points for \(labels.count) labels")
                    }
                }
            case "metric":
                try Self.allowOnly(c, ["type", "label", "value", "unit", "trend"])
                _ = try c.string("label", maxLength: 100)
                guard let value = c.fields["value"], value.numberValue != nil || value.stringValue.map({ $0.count <= 100 }) == true else {
                    throw JSONFieldError.invalid("\(path).value", "must be a number or short text")
                }
                _ = try c.optionalString("unit", maxLength: 20)
                if let trend = try c.optionalString("trend"), !Self.trends.contains(trend) {
                    throw JSONFieldError.invalid("\(path).trend", "'\(trend)' is not a trend; use one of \(Self.trends.joined(separator: ", "))")
                }
            default:
                throw JSONFieldError.invalid("\(path).type", "'\(type)' is not a component type; use one of \(Self.componentTypes.joined(separator: ", "))")
            }
        }
        json = value
        self.form = form.map { (id: $0.0, fields: $0.1) }
        self.checklists = checklists
        waitsForSubmit = form != nil || submit != nil
    }

    private static func allowOnly(_ object: JSONObject, _ allowed: [String]) throws(JSONFieldError) {
        for key in object.fields.keys.sorted() where !allowed.contains(key) {
            throw JSONFieldError.invalid(object.name(key), "is not a field here; allowed: \(allowed.joined(separator: ", "))")
        }
    }
}
