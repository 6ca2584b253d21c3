// #[amso_array] takes a type of the user's own only if it is an amso element type.
use amso_macros::amso_array;

#[derive(Clone, Copy, Debug, Default)]
pub struct Kelvin(f32);

#[amso_array(Kelvin, 1)]
pub struct Temperatures;

fn main() {}
