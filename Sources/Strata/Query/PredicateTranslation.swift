import Foundation

// Reads Foundation `#Predicate` expression trees into conditions the planner can put on an index.
// Each supported expression type conforms to a small protocol; anything else is `.unknown`, and
// the query still answers correctly by evaluating the predicate on decoded objects.
//
// A condition means exactly what the expression it came from means: `RecordFilter` evaluates it on
// encoded records instead of the predicate, and an exact plan skips the predicate altogether. A
// translation that can only over-approximate (a force unwrap, whose evaluation throws on nil; a
// library helper whose own semantics differ) is wrapped in `.narrowing`: the planner may use it
// to find candidates, and the whole predicate is then evaluated on every candidate.

enum CompareOp: String, Sendable {
    case eq = "==", ne = "!=", lt = "<", le = "<=", gt = ">", ge = ">="

    var flipped: CompareOp {
        switch self {
        case .lt: return .gt
        case .le: return .ge
        case .gt: return .lt
        case .ge: return .le
        default: return self
        }
    }
}

indirect enum Condition: CustomStringConvertible {
    case compare(path: String, op: CompareOp, value: Any)
    case isNil(path: String, Bool)
    case inList(path: String, values: [Any])
    case startsWith(path: String, prefix: String)
    case contains(path: String, substring: String)
    case arrayContains(path: String, value: Any)
    case and(Condition, Condition)
    case or(Condition, Condition)
    case not(Condition)
    /// Holds for every match (and perhaps for others): candidates only, never an answer.
    case narrowing(Condition)
    case unknown

    /// Whether this condition may stand in for the expression it came from (no `.narrowing` or
    /// `.unknown` anywhere inside).
    var isExactTranslation: Bool {
        switch self {
        case .narrowing, .unknown: return false
        case let .and(a, b), let .or(a, b): return a.isExactTranslation && b.isExactTranslation
        case let .not(c): return c.isExactTranslation
        default: return true
        }
    }

    var description: String {
        switch self {
        case let .compare(path, op, value): return "\(path) \(op.rawValue) \(show(value))"
        case let .isNil(path, isNil): return "\(path) \(isNil ? "==" : "!=") nil"
        case let .inList(path, values): return "\(path) in [\(values.map(show).joined(separator: ", "))]"
        case let .startsWith(path, prefix): return "\(path) starts with \"\(prefix)\""
        case let .contains(path, substring): return "\(path) contains \"\(substring)\""
        case let .arrayContains(path, value): return "\(path) contains element \(show(value))"
        case let .and(a, b): return "(\(a) && \(b))"
        case let .or(a, b): return "(\(a) || \(b))"
        case let .not(c): return "!(\(c))"
        case let .narrowing(c): return "≈\(c)"
        case .unknown: return "<expression>"
        }
    }
}

func show(_ value: Any) -> String {
    if let optional = value as? any OptionalValue {
        guard let wrapped = optional.wrappedAny else { return "nil" }
        return show(wrapped)
    }
    if let s = value as? String { return "\"\(s)\"" }
    if let r = value as? any RawRepresentable { return ".\(value)(\(show(r.rawValue)))" }
    return "\(value)"
}

/// A predicate's operand: a field of the object, or a constant. A field read through a force
/// unwrap is `unwrapped`: evaluating it throws where the field is nil, which no condition says.
enum Operand {
    case root
    case field(String)
    case unwrapped(String)
    case constant(Any)
    case nilLiteral
}

protocol OperandExpression { var operand: Operand? { get } }
protocol ConditionExpression { var condition: Condition { get } }

extension Predicate {
    /// What the planner understands of this predicate.
    var condition: Condition {
        (expression as? any ConditionExpression)?.condition ?? .unknown
    }
}

extension PredicateExpressions.Variable: OperandExpression {
    var operand: Operand? { .root }
}

extension PredicateExpressions.KeyPath: OperandExpression where Root: OperandExpression {
    var operand: Operand? {
        guard let component = fieldPath(of: keyPath as PartialKeyPath<Root.Output>) else { return nil }
        switch root.operand {
        case .root: return .field(component)
        case .field(let parent): return .field(parent + "." + component)
        default: return nil
        }
    }
}

extension PredicateExpressions.Value: OperandExpression {
    var operand: Operand? { .constant(value) }
}

extension PredicateExpressions.NilLiteral: OperandExpression {
    var operand: Operand? { .nilLiteral }
}

extension PredicateExpressions.ForcedUnwrap: OperandExpression where Inner: OperandExpression {
    var operand: Operand? {
        switch inner.operand {
        case .field(let path)?, .unwrapped(let path)?: return .unwrapped(path)
        default: return nil
        }
    }
}

extension PredicateExpressions.OptionalFlatMap: OperandExpression where LHS: OperandExpression, RHS: OperandExpression {
    var operand: Operand? {
        guard case .field(let parent)? = wrapped.operand, case .field(let child)? = transform.operand else { return nil }
        return .field(parent + "." + child)
    }
}

private func comparison(_ lhs: Operand?, _ rhs: Operand?, _ op: CompareOp) -> Condition {
    switch (lhs, rhs) {
    case let (.unwrapped(path)?, .constant(value)?): return .narrowing(.compare(path: path, op: op, value: value))
    case let (.constant(value)?, .unwrapped(path)?): return .narrowing(.compare(path: path, op: op.flipped, value: value))
    case let (.field(path)?, .constant(value)?): return .compare(path: path, op: op, value: value)
    case let (.constant(value)?, .field(path)?): return .compare(path: path, op: op.flipped, value: value)
    case let (.field(path)?, .nilLiteral?), let (.nilLiteral?, .field(path)?):
        if op == .eq { return .isNil(path: path, true) }
        if op == .ne { return .isNil(path: path, false) }
        return .unknown
    default: return .unknown
    }
}

extension PredicateExpressions.Equal: ConditionExpression where LHS: OperandExpression, RHS: OperandExpression {
    var condition: Condition { comparison(lhs.operand, rhs.operand, .eq) }
}

extension PredicateExpressions.NotEqual: ConditionExpression where LHS: OperandExpression, RHS: OperandExpression {
    var condition: Condition { comparison(lhs.operand, rhs.operand, .ne) }
}

extension PredicateExpressions.Comparison: ConditionExpression where LHS: OperandExpression, RHS: OperandExpression {
    var condition: Condition {
        let mapped: CompareOp
        switch op {
        case .lessThan: mapped = .lt
        case .lessThanOrEqual: mapped = .le
        case .greaterThan: mapped = .gt
        case .greaterThanOrEqual: mapped = .ge
        @unknown default: return .unknown
        }
        return comparison(lhs.operand, rhs.operand, mapped)
    }
}

extension PredicateExpressions.Conjunction: ConditionExpression {
    var condition: Condition {
        .and((lhs as? any ConditionExpression)?.condition ?? .unknown, (rhs as? any ConditionExpression)?.condition ?? .unknown)
    }
}

extension PredicateExpressions.Disjunction: ConditionExpression {
    var condition: Condition {
        .or((lhs as? any ConditionExpression)?.condition ?? .unknown, (rhs as? any ConditionExpression)?.condition ?? .unknown)
    }
}

extension PredicateExpressions.Negation: ConditionExpression {
    var condition: Condition { .not((wrapped as? any ConditionExpression)?.condition ?? .unknown) }
}

extension PredicateExpressions.SequenceContains: ConditionExpression where LHS: OperandExpression, RHS: OperandExpression {
    var condition: Condition {
        switch (sequence.operand, element.operand) {
        case let (.constant(list)?, .field(path)?):
            guard let values = list as? [Any] else { return .unknown }
            return .inList(path: path, values: values)
        case let (.field(path)?, .constant(value)?):
            return .arrayContains(path: path, value: value)
        default:
            return .unknown
        }
    }
}

extension PredicateExpressions.SequenceStartsWith: ConditionExpression where Base: OperandExpression, Prefix: OperandExpression {
    var condition: Condition {
        guard case .field(let path)? = base.operand, case .constant(let value)? = prefix.operand, let s = value as? String else { return .unknown }
        return .startsWith(path: path, prefix: s)
    }
}

extension PredicateExpressions.CollectionContainsCollection: ConditionExpression where Base: OperandExpression, Other: OperandExpression {
    var condition: Condition {
        guard case .field(let path)? = base.operand, case .constant(let value)? = other.operand, let s = value as? String else { return .unknown }
        return .contains(path: path, substring: s)
    }
}
